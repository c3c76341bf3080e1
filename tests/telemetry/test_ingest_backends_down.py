"""With Redis (channel layer and Celery broker) unreachable, ingest still answers 202 and the
readings are stored: they are safe once the transaction commits; the hand-on is only logged."""

import time

import pytest

from portal.ops.supervise import free_port
from tests.portal_process import ingest_post, manage, migrate, portal_env, running_portal
from tests.telemetry.batches import make_batch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def portal_without_redis(tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("redis-down")
    dead = f"redis://127.0.0.1:{free_port()}/0"  # a port nothing listens on
    env = portal_env(var_dir, REDIS_URL=dead, DJANGO_SETTINGS_MODULE="portal.settings")  # tasks sent to the broker
    migrate(env)
    token = manage(env, "issue_token", "lonely-host").stdout.strip().splitlines()[-1]
    with running_portal(env, var_dir) as portal:
        yield portal, token


def test_ingest_answers_202_and_stores_when_redis_is_down(portal_without_redis):
    portal, token = portal_without_redis
    batch = make_batch("lonely-host", readings=5)

    started = time.monotonic()
    status, body = ingest_post(portal.base_url, token, batch)
    elapsed = time.monotonic() - started

    assert (status, body) == (202, {"accepted": 5, "duplicate": False})
    assert elapsed < 10, f"ingest waited {elapsed:.1f} s on the dead broker"
    stored = manage(
        portal.env, "shell", "-c",
        "from portal.telemetry.models import Reading; print(Reading.objects.count())",
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    assert stored == "5"
    # The failure to hand the batch on is logged, not swallowed.
    log = portal.log.read_text()
    assert "failed for batch" in log or "Error" in log, log[-2000:]
    # The same batch again is still answered as a duplicate.
    assert ingest_post(portal.base_url, token, batch) == (200, {"accepted": 0, "duplicate": True})
