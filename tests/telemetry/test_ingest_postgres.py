"""PostgreSQL only: the same batch posted twice at once is stored once, and the one-statement,
COPY and bulk-insert paths store exactly the same rows."""

import datetime as dt
import threading
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.telemetry import ingest_view
from portal.telemetry.models import READING_METRICS, GpuLatest, IngestBatch, Reading, XidEvent
from portal.telemetry.services import ingest
from tests.telemetry.batches import gpu_uuid, make_batch, make_gpu, make_reading, post_batch
from tests.telemetry.conftest import agent_for

pytestmark = pytest.mark.postgres

A, B = gpu_uuid(1), gpu_uuid(2)


@pytest.mark.django_db(transaction=True)
def test_the_same_batch_posted_twice_at_once_is_stored_once(transactional_db, require_postgres, settings, monkeypatch):
    monkeypatch.setattr(ingest_view, "run_in_pool", True)
    agent = agent_for("dgx-race")
    # a GPU already known, so both requests go straight to the insert and race on the batch_id
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1)).status_code == 202
    # Each attempt's readings a minute apart from the others': attempts made a multiple of 100 ms apart
    # would otherwise share instants, and a second reading of a GPU at one instant is dropped.
    first = timezone.now() - dt.timedelta(minutes=10)
    for attempt in range(5):
        batch = make_batch(agent.hostname, gpus=[A], readings=500, step=dt.timedelta(milliseconds=100),
                           now=first + dt.timedelta(minutes=attempt))  # fmt: skip
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


def latest_of(hostname):
    return sorted(
        GpuLatest.objects.filter(gpu__host__hostname=hostname).values_list(
            "gpu__uuid", "ts", "temperature_c", "fan_speed_pct", "power_w", "power_limit_w", "utilization_gpu_pct",
            "memory_used_mib", "throttle_reasons",
        )
    )  # fmt: skip


@pytest.mark.django_db
def test_every_write_method_stores_the_same_rows(require_postgres, settings, monkeypatch):
    """The one-statement path (the usual batch on PostgreSQL), COPY and bulk insert store
    exactly the same readings, XID events and latest state, extreme values included."""
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    now = timezone.now().replace(microsecond=0)
    stored, latest, statements = {}, {}, {}
    for position, method in enumerate(ingest.PG_WRITE_METHODS):
        monkeypatch.setattr(ingest, "pg_write_method", method)
        hostname = "dgx-" + method.replace(" ", "-")
        agent = agent_for(hostname)
        uuids = [A.replace("GPU-", f"GPU-{position:02d}"), B.replace("GPU-", f"GPU-{position:02d}")]
        gpus = [make_gpu(u, i) for i, u in enumerate(uuids)]
        assert agent.post(make_batch(hostname, gpus=gpus, readings=0)).status_code == 202  # inventory first
        batch = make_batch(hostname, gpus=gpus, readings=0)
        batch["readings"] = [
            make_reading(uuids[0], now - dt.timedelta(seconds=3)),
            make_reading(uuids[1], now - dt.timedelta(seconds=2), **dict.fromkeys(READING_METRICS)),
            make_reading(uuids[0], now - dt.timedelta(seconds=1, milliseconds=250), temperature_c=-5, power_w=0.1,
                         energy_mj=2.0**52 + 0.5, throttle_reasons=["hw_thermal", "display_clocks_setting"],
                         ecc_corrected_volatile=2**62, pcie_replay_count=0, retired_pages_pending=True,
                         xid_events=[{"ts": batch["sent_at"], "code": 79}, {"ts": batch["sent_at"], "code": 13}]),
            make_reading(uuids[1], now, throttle_reasons=[], fan_speed_pct=100, utilization_gpu_pct=0),
            make_reading(uuids[1], now - dt.timedelta(seconds=30), temperature_c=99),  # late: not the latest
        ]  # fmt: skip
        with CaptureQueriesContext(connection) as queries:
            assert agent.post(batch).status_code == 202
        statements[method] = [query["sql"] for query in queries.captured_queries]
        stored[method] = [(row[0].replace(f"GPU-{position:02d}", "GPU-", 1), *row[1:]) for row in rows_of(hostname)]
        latest[method] = [(row[0].replace(f"GPU-{position:02d}", "GPU-", 1), *row[1:]) for row in latest_of(hostname)]
        xids = XidEvent.objects.filter(gpu__host__hostname=hostname)
        assert sorted(xids.values_list("code", flat=True)) == [13, 79]
        assert {xid.batch.batch_id for xid in xids} == {uuid.UUID(batch["batch_id"])}
    assert len(stored["copy"]) == 5
    assert stored["one statement"] == stored["copy"] == stored["bulk insert"]
    assert latest["one statement"] == latest["copy"] == latest["bulk insert"]
    assert [row[1] for row in latest["copy"]] == [now - dt.timedelta(seconds=1, milliseconds=250), now]
    # the usual batch really took one statement after the token lookup; the others several. (In the
    # test's transaction a savepoint wraps it, so that a missing day partition can be retried; the
    # portal runs it in autocommit, without one.)
    writes = [
        sql
        for sql in statements["one statement"]
        if not sql.lstrip().startswith(("SELECT", "SAVEPOINT", "RELEASE SAVEPOINT"))
    ]
    assert len(writes) == 1 and writes[0].lstrip().startswith("WITH batch AS"), statements["one statement"]
    assert any(sql.startswith('INSERT INTO "telemetry_ingestbatch"') for sql in statements["copy"])


@pytest.mark.django_db
def test_one_statement_stores_a_batch_once_and_a_late_batch_keeps_the_newest_latest(
    require_postgres, settings, monkeypatch
):
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    assert ingest.pg_write_method == "one statement"
    agent = agent_for("dgx-once")
    now = timezone.now().replace(microsecond=0)
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=2, now=now)).status_code == 202
    again = make_batch(agent.hostname, gpus=[A], readings=3, now=now)
    assert agent.post(again).status_code == 202
    answer = agent.post(again)
    assert (answer.status_code, answer.json()) == (200, {"accepted": 0, "duplicate": True})
    late = make_batch(agent.hostname, gpus=[A], readings=4, now=now - dt.timedelta(minutes=5))
    assert agent.post(late).status_code == 202
    # (gpu, ts) identifies a reading: the second batch's two readings at the first one's instants
    # are dropped (ON CONFLICT DO NOTHING), its third is stored; the batch itself is accepted.
    assert Reading.objects.count() == 2 + 1 + 4
    assert IngestBatch.objects.count() == 3
    assert GpuLatest.objects.get(gpu__uuid=A).ts == now


@pytest.mark.django_db
def test_copy_inside_a_failing_batch_leaves_nothing(require_postgres, settings, monkeypatch):
    """The COPY runs inside the batch's transaction: a batch refused after it (here: an
    host's GPU bound) stores nothing."""
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    assert ingest.pg_write_method != "bulk insert"  # a batch that changes the inventory: COPY
    agent = agent_for("dgx-atomic")
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=3)).status_code == 202
    settings.MAX_GPUS_PER_HOST = 1
    batch = make_batch(agent.hostname, gpus=[A, make_gpu(B, 1)], readings=10)
    assert agent.post(batch).status_code == 403
    assert Reading.objects.count() == 3
    assert IngestBatch.objects.count() == 1


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
@pytest.mark.parametrize("prepared", [True, False])
def test_per_batch_statements_are_prepared_unless_turned_off(require_postgres, settings, monkeypatch, prepared):
    """Prepared once per kept connection (PostgreSQL plans them once); off, for a pooler in
    transaction mode, nothing is left prepared on the connection and ingest works the same."""
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    settings.DATABASE_PREPARED_STATEMENTS = prepared
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # what earlier tests left on this connection (psycopg notices)
    agent = agent_for(f"dgx-prepared-{prepared}")
    for _ in range(3):
        assert agent.post(make_batch(agent.hostname, gpus=[A, B], readings=4)).status_code == 202
    statements = _prepared_statements()
    ingest_statements = [sql for sql in statements if "WITH batch AS" in sql]
    token_statements = [sql for sql in statements if "secret_hash" in sql]
    assert (len(ingest_statements), len(token_statements)) == ((1, 1) if prepared else (0, 0)), statements
    assert Reading.objects.filter(gpu__host__hostname=agent.hostname).count() == 12


@pytest.mark.django_db
def test_nothing_is_prepared_on_a_connection_opened_per_request(require_postgres, settings, monkeypatch):
    """DATABASE_CONN_MAX_AGE=0: the connection ends with the request, so preparing would only
    add a round trip."""
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    settings.DATABASE_PREPARED_STATEMENTS = True
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    agent = agent_for("dgx-per-request")
    for _ in range(2):
        assert agent.post(make_batch(agent.hostname, gpus=[A], readings=3)).status_code == 202
    assert _prepared_statements() == []
    assert Reading.objects.filter(gpu__host__hostname=agent.hostname).count() == 6


@pytest.mark.django_db
@pytest.mark.parametrize("method", ingest.PG_WRITE_METHODS)
def test_times_with_a_zone_offset_past_15_59_are_stored_in_utc(require_postgres, settings, monkeypatch, method):
    # RFC 3339 allows +19:04 and PostgreSQL refuses offsets over 15:59: each such time in a batch
    # is stored in UTC, not a 500
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    monkeypatch.setattr(ingest, "pg_write_method", method)
    agent = agent_for("dgx-" + method.replace(" ", "-"))
    now = timezone.now().replace(microsecond=0)
    far_east, far_west = dt.timezone(dt.timedelta(hours=19, minutes=4)), dt.timezone(-dt.timedelta(hours=23))
    batch = make_batch(agent.hostname, gpus=[A], readings=1, now=now, sent_at=now.astimezone(far_west).isoformat())
    batch["readings"][0]["ts"] = now.astimezone(far_east).isoformat()
    batch["readings"][0]["xid_events"] = [{"ts": now.astimezone(far_west).isoformat(), "code": 79}]
    answer = agent.post(batch)
    assert answer.status_code == 202, answer.content
    assert Reading.objects.get(gpu__uuid=A).ts == now
    assert XidEvent.objects.get(gpu__uuid=A).ts == now
    assert IngestBatch.objects.get(batch_id=batch["batch_id"]).sent_at == now


@pytest.mark.django_db
def test_counters_are_read_back_as_ints(require_postgres):
    """Counters are numeric on PostgreSQL; every reader gets them as ints (cast by the server)."""
    from portal.fleet.models import Gpu
    from portal.telemetry import store

    agent = agent_for("dgx-counters")
    batch = make_batch(agent.hostname, gpus=[A], readings=1)
    batch["readings"][0].update(ecc_corrected_volatile=2**62, pcie_replay_count=3)
    assert agent.post(batch).status_code == 202
    gpu_id = Gpu.objects.get(uuid=A).pk
    columns = ("ecc_corrected_volatile", "pcie_replay_count", "temperature_c")
    for rows in (
        store.readings_of(gpu_ids=[gpu_id], columns=columns),
        store.readings_after(after={gpu_id: None}, columns=columns, limit=10),
        store.readings_in_spans(spans=[([gpu_id], timezone.now() - dt.timedelta(hours=1), timezone.now())],
                                columns=columns),
    ):  # fmt: skip
        counters = [value for value in rows[-1] if value in (2**62, 3)]
        assert counters == [2**62, 3] and all(type(value) is int for value in counters), rows
