"""What a portal process loads at start on the embedded default: not the libraries only some
processes need (each was a tenth or more of a start, and the suite and `make demo` start dozens)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

NOT_AT_START = {
    "twisted": "the web server's own (Daphne imports it)",
    "psycopg": "PostgreSQL's driver, on SQLite",
    "redis": "the Redis client, without REDIS_URL",
    "requests": "the OIDC client, outside a sign-in",
    "jwt": "the OIDC client, outside a sign-in",
}


def test_a_process_on_the_embedded_default_loads_none_of_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(VAR_DIR=str(tmp_path), DEBUG="true", DJANGO_SETTINGS_MODULE="portal.settings")
    script = (
        "import json, sys, django; django.setup(); "
        "import portal.celery, portal.telemetry.tasks, portal.maintenance.tasks; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(NOT_AT_START)!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert not loaded, [f"{name}: {NOT_AT_START[name]}" for name in loaded]
