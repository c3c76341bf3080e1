"""The whole path through a real Celery worker on Redis: a batch with XID 79 is stored, the worker
evaluates it into a ticket, the ticket's hook queues the scheduler task after the commit, and the
same worker drains the real Slurm node."""

import json

import pytest
from celery.contrib.testing.worker import start_worker
from django.utils import timezone

from portal.maintenance.models import Ticket
from portal.scheduler.adapters import SlurmCli
from portal.scheduler.models import SchedulerAction
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services.ingest import reading_batch_ingest
from portal.telemetry.services.tokens import host_token_issue
from tests.maintenance.helpers import celery_configured, worker_wait_for
from tests.scheduler.helpers import GPUS
from tests.telemetry.batches import make_batch


@pytest.mark.redis
def test_xid_79_drains_the_node_through_a_real_worker(transactional_db, redis_url, cluster, settings):
    import redis

    settings.SLURM_ENABLED, settings.SLURM_MODE, settings.SLURM_BIN_DIR = True, "cli", ""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    host = host_token_issue(hostname=cluster.node, label="t", create_host=True).record.host
    now = timezone.now()
    batch = make_batch(cluster.node, gpus=GPUS, readings=len(GPUS), now=now)
    batch["readings"][0]["xid_events"] = [{"ts": batch["readings"][0]["ts"], "code": 79}]
    with (
        celery_configured(broker_url=redis_url, task_always_eager=False) as app,
        start_worker(app, perform_ping_check=False, pool="solo", loglevel="WARNING", shutdown_timeout=10),
    ):
        reading_batch_ingest(host=host, batch=BatchIn.model_validate_json(json.dumps(batch)), now=now)
        done = SchedulerAction.objects.filter(kind="drain", state="done")
        assert worker_wait_for(done.exists, 30), "the node was not drained within 30 s"
    ticket = Ticket.objects.get(rule="xid_bus")
    node = SlurmCli().node(cluster.node)
    assert node.state.split("+")[0] in ("drained", "draining")
    assert node.reason == f"gpu-fleet #{ticket.pk}: {ticket.title}"
