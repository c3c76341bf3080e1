"""A production install has no demo: with DEBUG off and DEMO unset the demo app is not installed,
so none of its commands (`seed_demo` would fill the database with a made-up fleet), URLs, tasks or
beat entries exist; DEMO=1, or DEBUG on (development, the tests, `manage.py demo` itself), installs
it."""

import json

import pytest

from tests.core.test_settings import PRODUCTION, manage

# What the started portal serves and schedules, printed as JSON by `manage.py shell`.
PROBE = """
import json
from django.apps import apps
from django.conf import settings
from django.urls import get_resolver
from portal.celery import app

def callbacks(patterns):
    for pattern in patterns:
        if hasattr(pattern, "url_patterns"):
            yield from callbacks(pattern.url_patterns)
        else:
            yield pattern.callback

app.loader.import_default_modules()  # Celery's autodiscovery of the installed apps' tasks
print(json.dumps({
    "installed": apps.is_installed("portal.demo"),
    "views": sorted({getattr(view, "__module__", "") or "" for view in callbacks(get_resolver().url_patterns)}),
    "tasks": sorted(app.tasks),
    "beat": sorted(entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()),
}))
"""


def served(tmp_path, **env) -> dict:
    result = manage("shell", "-c", PROBE, tmp_path=tmp_path, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def demo_names(found: dict) -> list[str]:
    return [name for key in ("views", "tasks", "beat") for name in found[key] if name.startswith("portal.demo")]


def test_production_has_no_demo(tmp_path):
    found = served(tmp_path, **PRODUCTION)
    assert found["installed"] is False
    assert demo_names(found) == []
    assert "portal.telemetry.tasks.pipeline_sweep_task" in found["tasks"]  # the probe sees the real ones
    result = manage("help", "seed_demo", tmp_path=tmp_path, **PRODUCTION)
    assert result.returncode != 0 and "Unknown command: 'seed_demo'" in result.stderr, result.stderr


@pytest.mark.parametrize("env", [{**PRODUCTION, "DEMO": "1"}, {"DEBUG": "true"}], ids=["DEMO=1", "DEBUG"])
def test_demo_or_debug_installs_the_demo(tmp_path, env):
    assert served(tmp_path, **env)["installed"] is True
    result = manage("help", "seed_demo", tmp_path=tmp_path, **env)
    assert result.returncode == 0 and "seed_demo" in result.stdout, result.stderr


def test_demo_must_be_a_boolean(tmp_path):
    result = manage("check", tmp_path=tmp_path, **PRODUCTION, DEMO="sometimes")
    assert result.returncode != 0 and "DEMO must be a boolean" in result.stderr, result.stderr
