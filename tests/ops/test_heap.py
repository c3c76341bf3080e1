"""The web server and the worker leave their start-up objects out of garbage collection (see
portal/ops/heap.py): a full collection then walks what was made since, not the whole heap."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import gc, sys
{load}
print(gc.get_freeze_count(), "portal.urls" in sys.modules, "portal.api" in sys.modules)
"""


def _frozen_after(load: str, tmp_path) -> tuple[int, bool, bool]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL"}}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", DEBUG="true", SECRET_KEY="x" * 50, VAR_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(load=load)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    count, urls, api = result.stdout.split()[-3:]
    return int(count), urls == "True", api == "True"


def test_the_web_server_freezes_its_loaded_application_with_the_urlconf(tmp_path):
    count, urls, api = _frozen_after("import portal.asgi", tmp_path)
    # Django, the apps, the API's schemas: far more objects than any request makes
    assert count > 100_000, count
    assert urls and api  # loaded before freezing, not on the first request


def test_a_worker_process_freezes_what_it_starts_with(tmp_path):
    load = (
        "import django; django.setup()\n"
        "from celery.signals import worker_process_init\n"
        "from portal.celery import app\n"
        "assert gc.get_freeze_count() == 0\n"
        "worker_process_init.send(sender=None)"
    )
    count, _, _ = _frozen_after(load, tmp_path)
    assert count > 50_000, count
