"""PostgreSQL only: the same batch posted twice at once is stored once, and the COPY path stores
exactly what the bulk-insert path stores."""

import datetime as dt
import threading

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from portal.telemetry.models import READING_METRICS, IngestBatch, Reading, XidEvent
from tests.telemetry.batches import gpu_uuid, make_batch, make_gpu, make_reading, post_batch
from tests.telemetry.conftest import agent_for

pytestmark = pytest.mark.postgres

A, B = gpu_uuid(1), gpu_uuid(2)


@pytest.mark.django_db(transaction=True)
def test_the_same_batch_posted_twice_at_once_is_stored_once(transactional_db, require_postgres, settings):
    settings.INGEST_PARALLEL = True
    agent = agent_for("dgx-race")
    # a GPU already known, so both requests go straight to the insert and race on the batch_id
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1)).status_code == 202
    for attempt in range(5):
        batch = make_batch(agent.hostname, gpus=[A], readings=500, step=dt.timedelta(milliseconds=100))
        start = threading.Barrier(2)
        answers = []

        def send(batch=batch, start=start, answers=answers):
            client = Client()
            start.wait()
            answers.append(post_batch(client, agent.token, batch))

        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        statuses = sorted(response.status_code for response in answers)
        assert statuses == [200, 202], (attempt, [r.content for r in answers])
        assert sorted(r.json()["duplicate"] for r in answers) == [False, True]
        assert IngestBatch.objects.filter(batch_id=batch["batch_id"]).count() == 1
    assert Reading.objects.count() == 1 + 5 * 500


def rows_of(hostname):
    columns = ("gpu__uuid", "ts", *READING_METRICS, "xid_count")
    return sorted(
        Reading.objects.filter(gpu__host__hostname=hostname).values_list(*columns), key=lambda row: (row[0], row[1])
    )


@pytest.mark.django_db
def test_copy_stores_the_same_rows_as_bulk_insert(require_postgres, settings):
    settings.INGEST_PARALLEL = False
    now = timezone.now().replace(microsecond=0)
    stored = {}
    for use_copy, hostname in ((True, "dgx-copy"), (False, "dgx-insert")):
        settings.INGEST_USE_COPY = use_copy
        agent = agent_for(hostname)
        uuids = [f"{hostname}-{A}", f"{hostname}-{B}"]
        batch = make_batch(hostname, gpus=[make_gpu(u, i) for i, u in enumerate(uuids)], readings=0)
        batch["readings"] = [
            make_reading(uuids[0], now - dt.timedelta(seconds=3)),
            make_reading(uuids[1], now - dt.timedelta(seconds=2), **dict.fromkeys(READING_METRICS)),
            make_reading(uuids[0], now - dt.timedelta(seconds=1, milliseconds=250), temperature_c=-5, power_w=0.1,
                         energy_mj=2.0**52 + 0.5, throttle_reasons=["hw_thermal", "display_clocks_setting"],
                         ecc_corrected_volatile=2**62, pcie_replay_count=0, retired_pages_pending=True,
                         xid_events=[{"ts": batch["sent_at"], "code": 79}, {"ts": batch["sent_at"], "code": 13}]),
            make_reading(uuids[1], now, throttle_reasons=[], fan_speed_pct=100, utilization_gpu_pct=0),
        ]  # fmt: skip
        assert agent.post(batch).status_code == 202
        stored[use_copy] = [(row[0].removeprefix(f"{hostname}-"), *row[1:]) for row in rows_of(hostname)]
    assert len(stored[True]) == 4
    assert stored[True] == stored[False]
    assert XidEvent.objects.filter(gpu__host__hostname="dgx-copy").count() == 2
    assert connection.vendor == "postgresql"


@pytest.mark.django_db
def test_copy_inside_a_failing_batch_leaves_nothing(require_postgres, settings):
    """The COPY runs inside the batch's transaction: a batch refused after it (here: an
    inventory the GPU model refuses, checked before the readings) stores nothing."""
    settings.INGEST_PARALLEL = False
    settings.INGEST_USE_COPY = True
    agent = agent_for("dgx-atomic")
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=3)).status_code == 202
    batch = make_batch(agent.hostname, gpus=[A, make_gpu(B, 1, temp_slowdown_c=99, temp_shutdown_c=50)], readings=10)
    assert agent.post(batch).status_code == 400
    assert Reading.objects.count() == 3
    assert IngestBatch.objects.count() == 1
