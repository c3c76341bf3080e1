"""PostgreSQL only: readings older than READINGS_COMPRESS_AFTER_HOURS are stored compressed, a row
per GPU and hour (services/compression.py), and every reader gets the same answer as before."""

import datetime as dt
import json
import uuid

import pytest
from django.db import connection, transaction
from django.utils import timezone

from portal.maintenance.models import Ticket
from portal.maintenance.selectors import ticket_chart
from portal.reports.rma import rma_evidence
from portal.telemetry import ledger, pipeline
from portal.telemetry.columns import READING_ROW_COLUMNS
from portal.telemetry.models import THROTTLE_BIT, IngestBatch, Reading, Rollup1h, Rollup1m
from portal.telemetry.selectors import gpu_series
from portal.telemetry.services import compression, partitions
from portal.telemetry.services.retention import telemetry_prune
from portal.telemetry.store import readings_of
from tests.factories import GpuFactory
from tests.telemetry.batches import gpu_uuid, make_batch
from tests.telemetry.conftest import agent_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

ALL = READING_ROW_COLUMNS
NOON = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)


PIPELINE_PENDING = ledger.oldest_pending_reading


@pytest.fixture(autouse=True)
def _nothing_pending(monkeypatch):
    # The pipeline's pending batches are the one consumer here; tests that need one say so.
    monkeypatch.setattr(ledger, "oldest_pending_reading", lambda: None)


def sample_readings(gpu, start: dt.datetime, count: int, step=dt.timedelta(seconds=10)) -> list[Reading]:
    """Readings with every column set, some NULL, extremes included; microseconds in the stamps."""
    rows = []
    for n in range(count):
        mixed = n % 3 == 0
        rows.append(
            Reading(
                gpu=gpu,
                ts=start + n * step + dt.timedelta(microseconds=n * 7 % 1000),
                temperature_c=None if n % 5 == 4 else 30 + n % 60,
                fan_speed_pct=None,
                power_w=80.25 + n * 1.5,
                power_limit_w=700.0,
                energy_mj=1.7e12 + n * 4123.456789,
                utilization_gpu_pct=n % 101,
                utilization_memory_pct=None if mixed else 41,
                memory_used_mib=80_000 + n,
                sm_clock_mhz=1980,
                mem_clock_mhz=2619 if n % 2 else None,
                pstate=0,
                throttle_reasons=(THROTTLE_BIT["hw_thermal"] | THROTTLE_BIT["display_clocks_setting"]) if mixed else 0,
                ecc_corrected_volatile=2**62 if n == 1 else 0,
                ecc_uncorrected_volatile=None,
                ecc_uncorrected_aggregate=n,
                retired_pages_pending=False,
                remapped_rows_pending=None if mixed else True,
                remapped_rows_failure=False,
                pcie_link_gen=5,
                pcie_link_width=16,
                pcie_replay_count=None if mixed else 3,
                xid_count=n % 2,
                job_set=None if n % 4 == 0 else 1 + n % 3,
            )  # fmt: skip
        )
    partitions.reading_partitions_ensure(days=sorted({row.ts.date() for row in rows}))
    Reading.objects.bulk_create(rows)
    return rows


def _chunks(gpu_id=None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT gpu_id, start, count FROM {compression.TABLE} WHERE %s IS NULL OR gpu_id = %s ORDER BY 1, 2",
            [gpu_id, gpu_id],
        )
        return cursor.fetchall()


def test_every_column_reads_back_the_same_once_compressed(require_postgres):
    gpu = GpuFactory()
    start = NOON - dt.timedelta(days=3, minutes=20)
    sample_readings(gpu, start, 400)
    before = readings_of(gpu_ids=[gpu.pk], columns=ALL)
    assert len(before) == 400 and before[1][ALL.index("ecc_corrected_volatile")] == 2**62
    done = compression.readings_compress(now=NOON)
    assert done["readings"] == 400
    assert not Reading.objects.filter(gpu=gpu).exists()
    assert [count for _, _, count in _chunks(gpu.pk)] == [120, 280]  # 11:40-12:00, 12:00-12:46
    after = readings_of(gpu_ids=[gpu.pk], columns=ALL)
    assert after == before
    assert [type(value) for value in after[1]] == [type(value) for value in before[1]]
    # a window inside: bounds open or closed, newest first with a limit
    edge = before[100][1]
    assert readings_of(gpu_ids=[gpu.pk], columns=("ts",), start=edge, end=before[110][1]) == [
        (row[1],) for row in before[100:110]
    ]
    assert readings_of(gpu_ids=[gpu.pk], columns=("ts",), start=edge, start_open=True, end=before[110][1],
                       end_closed=True) == [(row[1],) for row in before[101:111]]  # fmt: skip
    assert readings_of(gpu_ids=[gpu.pk], columns=("ts", "power_w"), end=edge, descending=True, limit=3) == [
        (row[1], row[ALL.index("power_w")]) for row in before[99:96:-1]
    ]


def test_a_chart_a_tickets_evidence_and_the_rma_report_are_the_same_before_and_after(require_postgres):
    gpu = GpuFactory()
    sample_readings(gpu, NOON - dt.timedelta(days=2, hours=3), 1500, step=dt.timedelta(seconds=20))
    first_seen = NOON - dt.timedelta(days=2, hours=1)
    ticket = Ticket.objects.create(fingerprint="f", rule="overheat", host=gpu.host, gpu=gpu, title="hot",
                                   first_seen=first_seen, last_seen=first_seen + dt.timedelta(minutes=20))  # fmt: skip

    def answers():
        metrics = ("temperature_c", "power_w", "throttle_reasons", "ecc_corrected_volatile")
        window = {"start": NOON - dt.timedelta(days=2, hours=2, minutes=7), "end": NOON - dt.timedelta(days=2)}
        raw = gpu_series(gpu=gpu, metrics=metrics, resolution="raw", **window)
        auto = gpu_series(gpu=gpu, metrics=("temperature_c",), **window)
        evidence = rma_evidence(gpu=gpu, now=NOON)
        return raw.ts, raw.values, auto.resolution, auto.ts, json.loads(ticket_chart(ticket=ticket)), evidence

    before = answers()
    assert len(before[0]) > 300 and before[2] == "raw"
    assert compression.readings_compress(now=NOON)["readings"] == 1500
    assert not Reading.objects.filter(gpu=gpu).exists()
    after = answers()
    names = ("chart ts", "chart values", "auto", "auto ts", "ticket", "rma")
    for name, old, new in zip(names, before, after, strict=True):
        assert new == old, name


def test_a_crash_leaves_the_raw_readings_and_a_rerun_does_nothing(require_postgres):
    gpu = GpuFactory()
    sample_readings(gpu, NOON - dt.timedelta(days=2), 50)
    with pytest.raises(RuntimeError), transaction.atomic():
        compression.readings_compress(now=NOON)
        raise RuntimeError("the worker dies before its transaction commits")
    assert Reading.objects.filter(gpu=gpu).count() == 50 and _chunks(gpu.pk) == []
    assert compression.readings_compress(now=NOON)["readings"] == 50
    chunks = _chunks(gpu.pk)
    assert compression.readings_compress(now=NOON) == {"readings": 0, "partitions": 0}
    assert _chunks(gpu.pk) == chunks and not Reading.objects.filter(gpu=gpu).exists()


def test_readings_a_pending_pipeline_batch_needs_stay_raw(require_postgres, monkeypatch):
    monkeypatch.setattr(ledger, "oldest_pending_reading", PIPELINE_PENDING)  # the real one again
    gpu = GpuFactory()
    start = NOON - dt.timedelta(days=3)
    sample_readings(gpu, start, 720)  # two hours
    pending_from = start + dt.timedelta(minutes=70)
    IngestBatch.objects.create(batch_id=uuid.uuid4(), host=gpu.host, sent_at=NOON, received_at=NOON, reading_count=1,
                               first_ts=pending_from, last_ts=pending_from)  # fmt: skip
    assert compression.compress_before(NOON) == start + dt.timedelta(hours=1)
    assert compression.readings_compress(now=NOON)["readings"] == 360
    assert Reading.objects.filter(gpu=gpu, ts__lt=start + dt.timedelta(hours=1)).count() == 0
    assert Reading.objects.filter(gpu=gpu).count() == 360
    assert len(readings_of(gpu_ids=[gpu.pk], columns=("ts",))) == 720


def test_a_late_reading_into_a_compressed_day_is_stored_rolled_up_and_merged(require_postgres, settings):
    agent = agent_for("dgx-late")
    now = timezone.now().replace(microsecond=0)
    day = (now - dt.timedelta(days=2)).date()
    hour = dt.datetime.combine(day, dt.time(10), dt.UTC)
    # a batch of that hour, compressed with its whole day
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=30, now=hour + dt.timedelta(minutes=30),
                                 step=dt.timedelta(seconds=60))).status_code == 202  # fmt: skip
    gpu = Reading.objects.first().gpu
    pipeline.pipeline_run()
    assert compression.readings_compress(now=now)["readings"] == 30
    name = partitions.partition_name(day)
    assert name in partitions.reading_partitions()  # renewed empty: ingest may still write to the day
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size(%s)", [name])
        assert cursor.fetchone()[0] == 0
    assert Rollup1h.objects.get(gpu=gpu, bucket=hour).count == 30
    # the late reading: stored, rolled up with the compressed ones
    # (its minute holds a compressed reading: the minute's row counts both)
    late = hour + dt.timedelta(minutes=20, seconds=30)
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1, now=late)).status_code == 202
    assert Reading.objects.filter(gpu=gpu).count() == 1
    pipeline.pipeline_run()
    assert Rollup1m.objects.get(gpu=gpu, bucket=hour + dt.timedelta(minutes=20)).count == 2
    assert Rollup1h.objects.get(gpu=gpu, bucket=hour).count == 31
    assert len(readings_of(gpu_ids=[gpu.pk], columns=("ts",), start=hour, end=hour + dt.timedelta(hours=1))) == 31
    # merged on the next run: one chunk for the hour, no raw row, the same readings
    both = readings_of(gpu_ids=[gpu.pk], columns=ALL)
    assert compression.readings_compress(now=now)["readings"] == 1
    assert readings_of(gpu_ids=[gpu.pk], columns=ALL) == both
    assert [count for _, start, count in _chunks(gpu.pk) if start == hour] == [31]
    assert not Reading.objects.filter(gpu=gpu).exists()
    assert len(readings_of(gpu_ids=[gpu.pk], columns=("ts",))) == 31


def test_retention_drops_compressed_hours_past_the_window(require_postgres, settings):
    settings.RETENTION_RAW_DAYS = 14
    gpu = GpuFactory()
    for days in (16, 15, 13):
        sample_readings(gpu, NOON - dt.timedelta(days=days), 10)
    assert compression.readings_compress(now=NOON)["readings"] == 30
    assert telemetry_prune(now=NOON)["readings"] == 20
    assert [start for _, start, _ in _chunks(gpu.pk)] == [NOON - dt.timedelta(days=13)]


def test_sqlite_or_postgres_the_read_function_answers_without_compression(db):
    """Everywhere (SQLite included): readings_of reads raw readings as values_list would."""
    gpu = GpuFactory()
    rows = sample_readings(gpu, NOON - dt.timedelta(hours=1), 5)
    got = readings_of(gpu_ids=[gpu.pk], columns=("ts", "temperature_c"))
    assert got == [(row.ts, row.temperature_c) for row in rows]


def test_a_gpus_deletion_takes_its_compressed_readings(require_postgres):
    gpu, other = GpuFactory(), GpuFactory()
    sample_readings(gpu, NOON - dt.timedelta(days=2), 10)
    sample_readings(other, NOON - dt.timedelta(days=2), 10)
    compression.readings_compress(now=NOON)
    gpu.delete()
    assert [gpu_id for gpu_id, _, _ in _chunks()] == [other.pk]
