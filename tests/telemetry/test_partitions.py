"""PostgreSQL only: readings live in day partitions created ahead (no insert ever misses one),
retention drops whole days, the hot reads prune partitions, and a reading sent twice is stored
once by every write path."""

import datetime as dt
import json
import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.telemetry import ledger, pipeline
from portal.telemetry.models import IngestBatch, Reading
from portal.telemetry.schemas import BatchIn
from portal.telemetry.selectors import gpu_series
from portal.telemetry.services import ingest, partitions
from portal.telemetry.services.retention import telemetry_prune
from tests.factories import GpuFactory
from tests.telemetry.batches import gpu_uuid, make_batch
from tests.telemetry.conftest import agent_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

A = gpu_uuid(1)


def _partition_of(gpu_id: int, ts: dt.datetime) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM telemetry_reading WHERE gpu_id = %s AND ts = %s", [gpu_id, ts]
        )
        return cursor.fetchone()[0]


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


def _scanned(plan: str) -> set[str]:
    """The partitions a plan reads (by their tables or their key index)."""
    return set(re.findall(r"telemetry_reading_(p\d{8}|default)\b", plan))


def test_the_table_is_partitioned_by_day_without_a_default_partition_in_the_portals_layout(require_postgres):
    assert partitions.partitioned()
    days = partitions.reading_partitions()
    assert days, "migrate created the days ingest may write to"
    for name, (start, end) in days.items():
        assert end - start == dt.timedelta(days=1) and name == partitions.partition_name(start.date())
    # the test database adds telemetry_reading_default (tests/conftest.py); nothing else is there
    assert partitions.other_partitions() == ["telemetry_reading_default"]


def test_readings_at_both_edges_of_the_acceptance_window_land_in_day_partitions(require_postgres, settings):
    agent = agent_for("dgx-edges")
    now = timezone.now().replace(microsecond=0)
    oldest = now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS)
    newest = now + ingest.MAX_FUTURE
    step = newest - oldest
    batch = BatchIn.model_validate_json(
        json.dumps(make_batch(agent.hostname, gpus=[A], readings=2, now=newest, step=step))
    )
    assert [reading.ts for reading in batch.readings] == [oldest, newest]
    assert ingest.reading_batch_ingest(host=agent.host, batch=batch, now=now).accepted == 2
    gpu_id = Reading.objects.get(ts=oldest).gpu_id
    assert _partition_of(gpu_id, oldest) == partitions.partition_name(oldest.date())
    assert _partition_of(gpu_id, newest) == partitions.partition_name(newest.date())


def test_the_hourly_task_creates_the_days_ahead(require_postgres, settings):
    later = timezone.now() + dt.timedelta(days=10)
    created = partitions.reading_partitions_ensure(now=later)
    assert partitions.partition_name((later + dt.timedelta(days=partitions.DAYS_AHEAD)).date()) in created
    assert partitions.reading_partitions_ensure(now=later) == []  # once


def test_retention_drops_whole_days_and_keeps_what_consumers_still_need(require_postgres, settings, monkeypatch):
    settings.RETENTION_RAW_DAYS = 14
    now = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    gpu = GpuFactory()
    old_days = [(now - dt.timedelta(days=n)).date() for n in (17, 16, 15, 14)]
    partitions.reading_partitions_ensure(days=old_days)
    Reading.objects.bulk_create(
        [
            Reading(gpu=gpu, ts=now - dt.timedelta(days=n, minutes=m), xid_count=0)
            for n in (17, 16, 15, 14)
            for m in (0, 30)
        ]
    )
    # a consumer (the wear meters) still needs readings from 16 days ago on
    monkeypatch.setattr(ledger, "oldest_pending_reading", lambda: now - dt.timedelta(days=16, hours=1))
    telemetry_prune(now=now)
    names = partitions.reading_partitions()
    assert partitions.partition_name(old_days[0]) not in names  # day -17: wholly before every cutoff
    assert all(partitions.partition_name(day) in names for day in old_days[1:])
    assert Reading.objects.filter(gpu=gpu).count() == 6
    monkeypatch.setattr(ledger, "oldest_pending_reading", lambda: None)
    deleted = telemetry_prune(now=now)["readings"]
    # cutoff now - 14 d: days -16 and -15 go whole; day -14 (the cutoff's own day) stays whole
    assert deleted == 4
    assert partitions.partition_name(old_days[3]) in partitions.reading_partitions()
    assert sorted(Reading.objects.filter(gpu=gpu).values_list("ts", flat=True)) == [
        now - dt.timedelta(days=14, minutes=30),
        now - dt.timedelta(days=14),
    ]


def test_the_chart_and_the_pipelines_batch_read_prune_partitions(require_postgres):
    agent = agent_for("dgx-prune")
    now = timezone.now().replace(microsecond=0)
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=5, now=now)).status_code == 202
    gpu = Reading.objects.first().gpu
    assert len(partitions.reading_partitions()) >= 9  # 7 days back, today, 3 ahead
    with CaptureQueriesContext(connection) as queries:
        gpu_series(gpu=gpu, start=now - dt.timedelta(hours=24), end=now, metrics=("temperature_c",), resolution="raw")
    chart = [query["sql"] for query in queries.captured_queries if "telemetry_reading" in query["sql"]]
    assert chart
    for sql in chart:
        scanned = _scanned(_plan(sql))
        assert 1 <= len(scanned) <= 2, scanned  # a 24 h span touches at most two days
    batches = [
        pipeline.StoredBatch(*row)
        for row in IngestBatch.objects.values_list(
            "pk", "host_id", "received_at", "first_ts", "last_ts", "reading_count"
        )
    ]
    with CaptureQueriesContext(connection) as queries:
        assert pipeline.block_read(batches).reading_total == 5
    rules = [query["sql"] for query in queries.captured_queries if "telemetry_reading" in query["sql"]]
    assert rules
    for sql in rules:
        scanned = _scanned(_plan(sql))
        assert 1 <= len(scanned) <= 2, scanned


@pytest.mark.parametrize("method", ingest.PG_WRITE_METHODS)
def test_a_reading_sent_again_in_another_batch_is_stored_once(require_postgres, monkeypatch, method):
    monkeypatch.setattr(ingest, "pg_write_method", method)
    agent = agent_for(f"dgx-again-{method.replace(' ', '-')}")
    now = timezone.now().replace(microsecond=0)
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=2, now=now)).status_code == 202
    # a new batch id, two of its three readings already stored (an agent that re-sends them)
    answer = agent.post(make_batch(agent.hostname, gpus=[A], readings=3, now=now))
    assert answer.status_code == 202, answer.content
    assert Reading.objects.filter(gpu__uuid=A).count() == 3
    assert IngestBatch.objects.count() == 2


def test_a_day_over_gets_its_key_index_rebuilt_once(require_postgres):
    now = timezone.now()
    yesterday = partitions.partition_name((now - dt.timedelta(days=1)).date())
    today = partitions.partition_name(now.date())
    rebuilt = partitions.reading_partitions_compact(now=now + dt.timedelta(hours=1))
    assert yesterday in rebuilt and today not in rebuilt
    assert yesterday not in partitions.reading_partitions_compact(now=now + dt.timedelta(hours=1))


def _indexes_of(table: str) -> dict[str, bool]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text, indisvalid FROM pg_index WHERE indrelid = to_regclass(%s)", [table]
        )
        return dict(cursor.fetchall())


def _leave_invalid_index(table: str, name: str) -> None:
    """What an interrupted REINDEX CONCURRENTLY leaves: a copy of the key index marked invalid."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE UNIQUE INDEX {name} ON {table} (gpu_id, ts)")
        cursor.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(%s)", [name])


def test_the_rebuild_drops_invalid_indexes_an_interrupted_rebuild_left(require_postgres):
    now = timezone.now()
    yesterday = partitions.partition_name((now - dt.timedelta(days=1)).date())
    today = partitions.partition_name(now.date())
    shipped = {name: _indexes_of(name) for name in (yesterday, today)}
    assert all(all(valid.values()) for valid in shipped.values()) and f"{today}_pkey" in shipped[today]
    _leave_invalid_index(yesterday, f"{yesterday}_pkey_ccnew")
    _leave_invalid_index(today, f"{today}_pkey_ccold")  # the day being written: not rebuilt, cleaned all the same
    with connection.cursor() as cursor:
        assert partitions.invalid_indexes(cursor) == sorted([f"{yesterday}_pkey_ccnew", f"{today}_pkey_ccold"])
    assert yesterday in partitions.reading_partitions_compact(now=now + dt.timedelta(hours=1))
    assert {name: _indexes_of(name) for name in (yesterday, today)} == shipped
    # a later run, the days already rebuilt, still cleans up after an interrupted one
    _leave_invalid_index(yesterday, f"{yesterday}_pkey_ccnew1")
    assert partitions.reading_partitions_compact(now=now + dt.timedelta(hours=1)) == []
    assert _indexes_of(yesterday) == shipped[yesterday]


def test_counters_read_back_as_int(require_postgres):
    gpu = GpuFactory()
    now = timezone.now().replace(microsecond=0)
    Reading.objects.create(gpu=gpu, ts=now, ecc_corrected_volatile=2**62, pcie_replay_count=0, xid_count=0)
    row = Reading.objects.values_list("ecc_corrected_volatile", "pcie_replay_count", "ecc_uncorrected_volatile").get()
    assert row == (2**62, 0, None) and type(row[0]) is int


def _drop_partitions_from(day: dt.date) -> list[str]:
    """Beat stopped for longer than DAYS_AHEAD: no partition for `day` or later (nor the test
    database's default one)."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("DROP TABLE IF EXISTS telemetry_reading_default")
        gone = [name for name, (start, _) in partitions.reading_partitions(cursor).items() if start.date() >= day]
        for name in gone:
            cursor.execute(f"DROP TABLE {name}")
    return gone


@pytest.mark.parametrize("method", ingest.PG_WRITE_METHODS)
def test_ingest_creates_the_missing_day_partitions_and_stores_the_batch_once(require_postgres, monkeypatch, method):
    monkeypatch.setattr(ingest, "pg_write_method", method)
    agent = agent_for(f"dgx-nopart-{method.replace(' ', '-')}")
    now = timezone.now().replace(microsecond=0)
    # Registers the GPU, so that the next batch is "the usual" one (one statement's path).
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1, now=now)).status_code == 202
    assert partitions.partition_name(now.date()) in _drop_partitions_from(now.date())
    with pytest.raises(Exception) as refused, transaction.atomic():
        Reading.objects.create(gpu=Gpu.objects.get(uuid=A), ts=now, xid_count=0)
    assert partitions.missing_partition(refused.value)
    batch = make_batch(agent.hostname, gpus=[A], readings=4, now=now + dt.timedelta(seconds=10))
    answer = agent.post(batch)
    assert answer.status_code == 202, answer.content
    assert answer.json()["accepted"] == 4
    assert Reading.objects.filter(gpu__uuid=A).count() == 4
    assert IngestBatch.objects.filter(batch_id=batch["batch_id"]).count() == 1
    days = partitions.reading_partitions()
    assert {partitions.partition_name(day) for day in partitions.days_needed(now)} <= days.keys()
    assert _partition_of(Reading.objects.first().gpu_id, now + dt.timedelta(seconds=10)) == partitions.partition_name(
        (now + dt.timedelta(seconds=10)).date()
    )
    # the transaction the batch was stored in is still usable: sent again, a duplicate
    again = agent.post(batch)
    assert again.status_code in (200, 202) and again.json().get("duplicate") is True, again.content
    assert Reading.objects.filter(gpu__uuid=A).count() == 4


def test_a_check_constraint_is_not_taken_for_a_missing_partition(require_postgres):
    gpu = GpuFactory()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE telemetry_reading ADD CONSTRAINT test_xids CHECK (xid_count >= 0)")
    with pytest.raises(Exception) as refused, transaction.atomic():
        Reading.objects.create(gpu=gpu, ts=timezone.now(), xid_count=-1)
    assert not partitions.missing_partition(refused.value)


@pytest.mark.django_db(transaction=True)
def test_ingest_creates_the_missing_day_partitions_outside_a_transaction(require_postgres):
    """The portal's own case: the one statement runs in autocommit (no savepoint around it), and
    the partitions are created in a transaction of their own before it runs again."""
    agent = agent_for("dgx-nopart-autocommit")
    now = timezone.now().replace(microsecond=0)
    try:
        assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1, now=now)).status_code == 202
        _drop_partitions_from(now.date())
        batch = make_batch(agent.hostname, gpus=[A], readings=4, now=now + dt.timedelta(seconds=10))
        answer = agent.post(batch)
        assert answer.status_code == 202, answer.content
        assert Reading.objects.filter(gpu__uuid=A).count() == 4
        assert partitions.partition_name(now.date()) in partitions.reading_partitions()
    finally:
        partitions.reading_partitions_ensure()  # the test database's layout again (its default partition too)


@pytest.mark.django_db(transaction=True)
def test_the_rebuild_outside_a_transaction_drops_invalid_indexes_concurrently(require_postgres):
    """The portal's own case (the hourly task, autocommit): DROP INDEX CONCURRENTLY, then REINDEX
    CONCURRENTLY."""
    now = timezone.now()
    yesterday = partitions.partition_name((now - dt.timedelta(days=1)).date())
    shipped = _indexes_of(yesterday)
    try:
        _leave_invalid_index(yesterday, f"{yesterday}_pkey_ccnew")
        assert yesterday in partitions.reading_partitions_compact(now=now + dt.timedelta(hours=1))
        assert _indexes_of(yesterday) == shipped
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP INDEX IF EXISTS "{yesterday}_pkey_ccnew"')
            for name in partitions.reading_partitions(cursor):
                cursor.execute(f"COMMENT ON TABLE {name} IS NULL")  # rebuilt again by the other tests
