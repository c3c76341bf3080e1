"""The evaluation task through a real Celery worker on Redis: ingest commits a batch, the hook
queues the task, a worker thread (solo pool) evaluates it, and the ticket appears."""

import datetime as dt
import json

import pytest
from celery.contrib.testing.worker import start_worker
from django.utils import timezone

from portal.maintenance.models import Ticket
from portal.telemetry.models import StageDone
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services.ingest import reading_batch_ingest
from portal.telemetry.services.tokens import host_token_issue
from tests.maintenance.helpers import celery_configured, worker_wait_for
from tests.telemetry.batches import make_batch, make_gpu, make_reading

UUID = "GPU-0000c0de-6b9b-4b4e-9d0a-6f1c1a2b3c4d"


@pytest.mark.redis
def test_ingested_batch_is_evaluated_by_a_real_worker(transactional_db, redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()  # no messages left over from an earlier run
    client.close()
    host = host_token_issue(hostname="dgx-worker", label="t", create_host=True).record.host
    now = timezone.now()
    batch = make_batch("dgx-worker", readings=0, now=now)
    batch["gpus"] = [make_gpu(UUID)]
    # 89 °C for 3 minutes of reading time (slowdown 90: opens after 2 min at ≥ 85 °C).
    batch["readings"] = [make_reading(UUID, now - dt.timedelta(seconds=10 * (18 - i)), temperature_c=89)
                         for i in range(19)]  # fmt: skip
    with (
        celery_configured(broker_url=redis_url, task_always_eager=False) as app,
        start_worker(app, perform_ping_check=False, pool="solo", loglevel="WARNING", shutdown_timeout=10),
    ):
        result = reading_batch_ingest(host=host, batch=BatchIn.model_validate_json(json.dumps(batch)), now=now)
        assert not result.duplicate
        assert worker_wait_for(Ticket.objects.filter(rule="overheat").exists, 20), "no ticket within 20 s"
    assert StageDone.objects.filter(stage="rules", batch_pk=result.batch_pk).exists()
    ticket = Ticket.objects.get(rule="overheat")
    assert ticket.gpu.uuid == UUID and ticket.peak_value == 89
