"""The test suite's settings: the portal's own, plus what the tests need.

The portal's defaults are production-safe (DEBUG off, SECRET_KEY required); the suite turns
DEBUG on while the settings are read (plain static files, no HTTPS redirect; Django's test
runner still runs the views with DEBUG off) and runs Celery tasks in-process where they are
sent, so unit tests see a task's effect right away. The integration tests in
tests/ops/test_embedded.py run the real worker and beat instead.
"""

import json
import os

_TEST_ENV = {"DEBUG": "true", "SECRET_KEY": "tests-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"}
_saved = {name: os.environ.get(name) for name in _TEST_ENV}
for _name, _value in _TEST_ENV.items():
    os.environ.setdefault(_name, _value)
try:
    from portal.settings import *  # noqa: F403
finally:
    # Subprocesses the tests start (manage.py, Daphne) get the environment as it was.
    for _name, _value in _saved.items():
        if _value is None:
            os.environ.pop(_name, None)

CELERY_TASK_ALWAYS_EAGER = True
# ...and sent once per batch, not debounced (a debounced send fires on a timer thread, after the
# test has looked).
PIPELINE_DEBOUNCE_S = 0

# Login throttling is off: the suite logs in all the time, from one address. The tests of the
# throttling itself (tests/accounts/test_login_throttling.py) turn it on.
AXES_ENABLED = False

# The test client speaks plain HTTP and Django's runner turns DEBUG off, so ingest would refuse
# every batch; tests/telemetry/test_ingest_plain_http.py turns the refusal back on.
INGEST_ALLOW_HTTP = True

# No burn-in diagnostic for GPUs the tests' agents register (their answers would carry a command
# every other test would have to expect); tests/diagnostics/test_burn_in.py turns it on.
BURN_IN_LEVEL = 0

# SQLite's test database is in memory, as Django does unless told otherwise, said outright because
# pytest-django recognises only Django's own sqlite3 engine, not the portal's subclass: without it
# each xdist worker would be given a file named after the portal's database path.
if DATABASES["default"]["ENGINE"] == "portal.core.sqlite_backend":  # noqa: F405
    DATABASES["default"].setdefault("TEST", {})["NAME"] = ":memory:"  # noqa: F405

# A password checked or set costs the portal's hasher (PBKDF2, a million iterations) a quarter of
# a CPU-second, on purpose; the suite logs in and checks passwords hundreds of times. Django's
# advice for tests: a fast hasher. The portals the suite starts in subprocesses keep the real one,
# and tests/accounts/test_token_lifecycle.py checks the upgrade to it.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# WhiteNoise reads the finders' static files whenever a handler loads the middleware, as each test
# client does, unless it looks files up per request: DEBUG (on while the settings are read) turns
# the finders on, and Django's runner turning DEBUG off turns the lookup per request off. About
# 25 ms a client, and the suite makes thousands of clients; the lookup per request serves the same
# files (the suite's own requests for static files go through a portal it starts).
WHITENOISE_AUTOREFRESH = True

# A throwaway metric for tests/telemetry/test_throwaway_metric.py's child process (portal/telemetry/metrics.py).
TELEMETRY_EXTRA_METRICS = json.loads(os.environ.get("PORTAL_EXTRA_METRICS", "[]"))
