"""PostgreSQL only: rollups of the days before the readings' compression cutoff are stored
compressed, a row per GPU and day (services/rollup_chunks.py), and every reader of rollups (the
chart API at 1m and 1h, the RMA pack's hourly history, beat's cleaning meter, hours built from
minutes) gets the same answer as from raw rows."""

import datetime as dt

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test import Client

from portal.fleet.models import Gpu
from portal.maintenance.models import Ticket
from portal.maintenance.services import beat
from portal.maintenance.services.config import rule_config_set
from portal.reports.rma import rma_evidence
from portal.telemetry import ledger
from portal.telemetry.models import ROLLUP_HOUR_FIELDS, ROLLUP_MINUTE_FIELDS, Reading, Rollup1h, Rollup1m
from portal.telemetry.selectors import gpu_series
from portal.telemetry.services import compression, rollup_chunks
from portal.telemetry.services.retention import telemetry_prune
from portal.telemetry.store import rollups_of
from tests.factories import GpuFactory, HostFactory
from tests.pipeline import batches_recorded, stage_run
from tests.telemetry.test_compression import NOON, sample_readings

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

DAY = dt.timedelta(days=1)
MINUTE_COLUMNS = ("bucket", *ROLLUP_MINUTE_FIELDS)
HOUR_COLUMNS = ("bucket", *ROLLUP_HOUR_FIELDS)


@pytest.fixture(autouse=True)
def _nothing_pending(monkeypatch):
    monkeypatch.setattr(ledger, "oldest_pending_reading", lambda: None)


def _rolled_up(gpu, start: dt.datetime, count: int, step=dt.timedelta(seconds=10)) -> None:
    """Readings (every column, some NULL) and their rollups, written by the pipeline."""
    batches_recorded(sample_readings(gpu, start, count, step=step))
    stage_run("rollups")


def _chunks(table: str, gpu_id: int) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT start, buckets FROM {table} WHERE gpu_id = %s ORDER BY start", [gpu_id])
        return cursor.fetchall()


def _compress_gpu(gpu) -> int:
    """Compress one GPU's raw rollups of every day before the cutoff (the others stay raw)."""
    done = 0
    before = rollup_chunks.compress_before(NOON)
    for resolution, model in (("1m", Rollup1m), ("1h", Rollup1h)):
        res = rollup_chunks.RESOLUTIONS[resolution]
        periods = {
            res.start_of(bucket)
            for bucket in model.objects.filter(gpu=gpu, bucket__lt=before).values_list("bucket", flat=True)
        }
        done += sum(rollup_chunks.compress_gpu_period(resolution, gpu.pk, start, before) for start in sorted(periods))
    return done


def _all(gpu) -> tuple[list, list]:
    return (
        rollups_of(gpu_ids=[gpu.pk], resolution="1m", columns=MINUTE_COLUMNS),
        rollups_of(gpu_ids=[gpu.pk], resolution="1h", columns=HOUR_COLUMNS),
    )


def test_every_rollup_column_reads_back_the_same_once_compressed(require_postgres):
    gpu, recent = GpuFactory(), GpuFactory()
    start = NOON - dt.timedelta(days=3, minutes=20)
    _rolled_up(gpu, start, 400)  # 11:40 to 12:46, three days ago
    _rolled_up(gpu, NOON - dt.timedelta(hours=2), 30)  # today: stays raw
    # within the cutoff's day (READINGS_COMPRESS_AFTER_HOURS before now, down to a day): stays raw
    _rolled_up(recent, NOON - dt.timedelta(hours=settings.READINGS_COMPRESS_AFTER_HOURS + 6), 30)
    minutes, hours = _all(gpu)
    assert len(minutes) == 67 + 5 and len(hours) == 2 + 1
    assert any(value is None for row in minutes for value in row)  # NULLs included (fan speed)
    before_recent = _all(recent)

    done = rollup_chunks.rollups_compress(now=NOON)
    assert done == {"rollups_1m": 67, "rollups_1h": 2}
    assert Rollup1m.objects.filter(gpu=gpu).count() == 5 and Rollup1h.objects.filter(gpu=gpu).count() == 1
    assert _chunks("telemetry_rollup1m_chunk", gpu.pk) == [(start.replace(hour=0, minute=0), 67)]
    assert _chunks("telemetry_rollup1h_chunk", gpu.pk) == [(start.replace(day=1, hour=0, minute=0), 2)]  # a month
    assert _all(gpu) == (minutes, hours)
    assert [type(value) for value in _all(gpu)[0][0]] == [type(value) for value in minutes[0]]
    assert _all(recent) == before_recent and Rollup1m.objects.filter(gpu=recent).count() == 5
    # a window inside, some columns, in their order; several GPUs at once
    window = rollups_of(gpu_ids=[gpu.pk], resolution="1m", columns=("power_w_max", "bucket"),
                        start=minutes[10][0], end=minutes[20][0])  # fmt: skip
    position = MINUTE_COLUMNS.index("power_w_max")
    assert window == [(row[position], row[0]) for row in minutes[10:20]]
    both = rollups_of(gpu_ids=[recent.pk, gpu.pk], resolution="1h", columns=("gpu_id", "bucket"))
    assert [row[0] for row in both] == sorted([gpu.pk] * 3 + [recent.pk]) and len(both) == 4
    # rerun: nothing to do
    assert rollup_chunks.rollups_compress(now=NOON) == {"rollups_1m": 0, "rollups_1h": 0}


def test_values_no_rollup_pass_writes_come_back_exactly_too(require_postgres):
    """Means that are not a whole sum over their count (stored as floats then), a mean beside a
    count of 0, and energy counters that fall, wrap sign or are missing."""
    gpu = GpuFactory()
    minute = NOON - dt.timedelta(days=3)
    odd = [  # temperature: not a whole sum over its count; memory: a mean beside a count of 0
        {"temperature_c_mean": 33.3, "temperature_c_count": 3, "energy_mj_max": 1.7e12},
        {"temperature_c_mean": 41.0, "temperature_c_count": 1, "memory_used_mib_mean": 9.0, "energy_mj_max": -5.5},
        {"temperature_c_mean": 57.516666, "temperature_c_count": 6, "energy_mj_max": None},
        {"temperature_c_mean": None, "temperature_c_count": 0, "energy_mj_max": 1.5e308},
        {"temperature_c_mean": 1e-3, "temperature_c_count": 1, "energy_mj_max": 0.0},
    ]
    Rollup1m.objects.bulk_create(
        Rollup1m(gpu=gpu, bucket=minute + dt.timedelta(minutes=n), count=6, **values) for n, values in enumerate(odd)
    )
    # and a column of whole sums: stored as sums
    Rollup1m.objects.bulk_create(
        Rollup1m(gpu=gpu, bucket=minute + dt.timedelta(minutes=10 + n), count=6, utilization_gpu_pct_mean=(n * 7) / 6,
                 utilization_gpu_pct_count=6)
        for n in range(5)
    )  # fmt: skip
    before = _all(gpu)[0]
    assert rollup_chunks.rollups_compress(now=NOON)["rollups_1m"] == 10
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT temperature_c_mean, memory_used_mib_mean, utilization_gpu_pct_mean FROM telemetry_rollup1m_chunk"
        )
        temperature, memory, utilization = (bytes(blob)[:1] for blob in cursor.fetchone())
    assert temperature != b"S" and memory != b"S" and utilization == b"S"
    assert _all(gpu)[0] == before
    means = rollups_of(gpu_ids=[gpu.pk], resolution="1m", columns=("temperature_c_mean",))
    assert means[:3] == [(33.3,), (41.0,), (57.516666,)]


def test_the_chart_api_the_rma_pack_and_beat_answer_the_same_from_compressed_rollups(require_postgres, viewer):
    """Two hosts with a GPU each and the same readings: one GPU's rollups compressed, the other's raw."""
    raw, packed = GpuFactory(host=HostFactory()), GpuFactory(host=HostFactory())
    start = NOON - dt.timedelta(days=4, hours=3)
    for gpu in (raw, packed):
        _rolled_up(gpu, start, 1500, step=dt.timedelta(seconds=60))  # 25 hours over two days
        failed = start + dt.timedelta(hours=12)
        Ticket.objects.create(fingerprint=f"x-{gpu.pk}", rule="xid_bus", host=gpu.host, gpu=gpu, title="fell off",
                              first_seen=failed, last_seen=failed)  # fmt: skip
        type(gpu.host).objects.filter(pk=gpu.host_id).update(created_at=NOON - dt.timedelta(days=10))
    assert _compress_gpu(packed) == 1500 + 25  # two days of minutes, their hours
    assert not Rollup1m.objects.filter(gpu=packed).exists() and Rollup1m.objects.filter(gpu=raw).count() == 1500

    client = Client()
    client.force_login(viewer)

    def chart(gpu, resolution):
        window = {"from": (start - dt.timedelta(minutes=30)).isoformat(), "to": (start + DAY).isoformat()}
        response = client.get(f"/api/v1/gpus/{gpu.uuid}/readings", {**window, "resolution": resolution,
                                                                      "metrics": "temperature_c,power_w"})  # fmt: skip
        assert response.status_code == 200, response.content
        return response.json()

    for resolution, points in (("1m", 1440), ("1h", 24)):
        expected = chart(raw, resolution)
        assert len(expected["ts"]) == points and expected["values"]["power_w"][5] is not None
        got = chart(packed, resolution)
        assert {k: v for k, v in got.items() if k != "gpu"} == {k: v for k, v in expected.items() if k != "gpu"}
    series = gpu_series(gpu=packed, start=start, end=start + DAY, metrics=("utilization_gpu_pct",), resolution="1h")
    assert series.ts[0] == start and len(series.ts) == 24

    thermal = [rma_evidence(gpu=gpu, now=NOON)["thermal_around_failure"] for gpu in (raw, packed)]
    assert len(thermal[0]) == 25 and thermal[1] == thermal[0]

    # beat's cleaning meter: GPU-hours at high load since the host's creation
    for gpu in (raw, packed):
        rule_config_set(rule="schedule_cleaning", params={"gpu_hours_high_load": 3, "high_load_util_pct": 45,
                                                          "busy_hours": None}, host=gpu.host)  # fmt: skip
    beat.schedules_check(now=NOON)
    notes = {
        ticket.gpu_id or ticket.host_id: " ".join(ticket.events.values_list("note", flat=True))
        for ticket in Ticket.objects.filter(rule="schedule_cleaning")
    }
    assert set(notes) == {raw.host_id, packed.host_id}
    assert "GPU-hours at high load" in notes[raw.host_id] and notes[packed.host_id] == notes[raw.host_id]


def test_a_late_reading_into_a_compressed_day_changes_the_answer_as_on_raw_rows(require_postgres):
    raw, packed = GpuFactory(), GpuFactory()
    start = NOON - dt.timedelta(days=3, hours=1)
    for gpu in (raw, packed):
        _rolled_up(gpu, start, 360)  # one hour
    _compress_gpu(packed)
    assert not Rollup1m.objects.filter(gpu=packed).exists()
    minute = start + dt.timedelta(minutes=20)
    late = [
        Reading.objects.create(gpu=gpu, ts=minute + dt.timedelta(seconds=5), temperature_c=99, power_w=1000.5,
                               utilization_gpu_pct=100, xid_count=0)
        for gpu in (raw, packed)
    ]  # fmt: skip
    batches_recorded(late)
    assert stage_run("rollups") == 2  # each late reading's minute and hour again
    # the packed GPU's minute and hour written raw again, beside its compressed day
    assert Rollup1m.objects.filter(gpu=packed).count() == 1 and Rollup1h.objects.filter(gpu=packed).count() == 1
    expected = _all(raw)
    assert [row[1] for row in expected[1]] == [361]
    assert max(row[ROLLUP_HOUR_FIELDS.index("temperature_c_max") + 1] for row in expected[1]) == 99
    assert _all(packed) == expected
    # merged on the next run: no raw row left, the same answers
    assert rollup_chunks.rollups_compress(now=NOON) == {"rollups_1m": 61, "rollups_1h": 2}
    assert not Rollup1m.objects.filter(gpu=packed).exists() and not Rollup1h.objects.filter(gpu=packed).exists()
    assert _all(packed) == expected == _all(raw)


def test_a_crash_leaves_the_raw_rollups_and_each_gpu_day_commits_alone(require_postgres, monkeypatch):
    first, second = GpuFactory(), GpuFactory()
    for gpu in (first, second):
        _rolled_up(gpu, NOON - dt.timedelta(days=2), 60)
    before = _all(first), _all(second)
    with pytest.raises(RuntimeError), transaction.atomic():
        rollup_chunks.rollups_compress(now=NOON)
        raise RuntimeError("the worker dies before its transaction commits")
    assert Rollup1m.objects.count() == 20 and _chunks("telemetry_rollup1m_chunk", first.pk) == []

    # dies while encoding the second GPU's day: the first's chunk and deletes are committed, the
    # second's day is all raw (no chunk without its rows deleted, no rows deleted without a chunk)
    real, calls = compression.encode_values, []

    def encode_then_die(kind, values):
        calls.append(kind)
        if len(calls) > len(rollup_chunks.RESOLUTIONS["1m"].columns):
            raise RuntimeError("killed")
        return real(kind, values)

    monkeypatch.setattr(compression, "encode_values", encode_then_die)
    with pytest.raises(RuntimeError):
        rollup_chunks.rollups_compress(now=NOON)
    assert not Rollup1m.objects.filter(gpu=first).exists() and len(_chunks("telemetry_rollup1m_chunk", first.pk)) == 1
    assert Rollup1m.objects.filter(gpu=second).count() == 10 and _chunks("telemetry_rollup1m_chunk", second.pk) == []
    assert (_all(first), _all(second)) == before
    monkeypatch.setattr(compression, "encode_values", real)
    assert rollup_chunks.rollups_compress(now=NOON) == {"rollups_1m": 10, "rollups_1h": 2}
    assert (_all(first), _all(second)) == before


def test_retention_drops_whole_compressed_minute_days_and_keeps_the_hours(require_postgres, settings):
    settings.RETENTION_1M_DAYS = 90
    gpu = GpuFactory()
    for days in (92, 91, 89):
        _rolled_up(gpu, NOON - dt.timedelta(days=days), 12)  # two minutes a day
    rollup_chunks.rollups_compress(now=NOON)
    assert len(_chunks("telemetry_rollup1m_chunk", gpu.pk)) == 3
    # 90 days before noon is a noon: that day's minutes stay until it has passed whole
    assert telemetry_prune(now=NOON)["rollups_1m"] == 4
    kept = [start for start, _ in _chunks("telemetry_rollup1m_chunk", gpu.pk)]
    assert kept == [(NOON - dt.timedelta(days=89)).replace(hour=0)]
    assert [row[0] for row in rollups_of(gpu_ids=[gpu.pk], resolution="1m", columns=("bucket",))] == [
        NOON - dt.timedelta(days=89),
        NOON - dt.timedelta(days=89, seconds=-60),
    ]
    assert len(rollups_of(gpu_ids=[gpu.pk], resolution="1h", columns=("bucket",))) == 3  # hours are kept


def test_a_gpus_deletion_takes_its_compressed_rollups(require_postgres):
    gpu, other = GpuFactory(), GpuFactory()
    for each in (gpu, other):
        _rolled_up(each, NOON - dt.timedelta(days=2), 10)
    rollup_chunks.rollups_compress(now=NOON)
    gpu.delete()
    assert not Gpu.objects.filter(pk=gpu.pk).exists()
    with connection.cursor() as cursor:
        for table in ("telemetry_rollup1m_chunk", "telemetry_rollup1h_chunk"):
            cursor.execute(f"SELECT DISTINCT gpu_id FROM {table}")
            assert cursor.fetchall() == [(other.pk,)]


def test_migrating_back_restores_every_compressed_rollup(require_postgres):
    gpu = GpuFactory()
    _rolled_up(gpu, NOON - dt.timedelta(days=2), 100)
    before = _all(gpu)
    rollup_chunks.rollups_compress(now=NOON)
    assert rollup_chunks.chunks_restore_all() == 17 + 1
    assert Rollup1m.objects.filter(gpu=gpu).count() == 17 and _chunks("telemetry_rollup1m_chunk", gpu.pk) == []
    assert _all(gpu) == before


def test_sqlite_or_postgres_rollups_of_reads_raw_rows(db):
    """Everywhere (SQLite included): rollups_of reads raw rows as values_list would."""
    gpu = GpuFactory()
    _rolled_up(gpu, NOON - dt.timedelta(hours=1), 12)
    got = rollups_of(gpu_ids=[gpu.pk], resolution="1m", columns=("bucket", "count"))
    assert got == list(Rollup1m.objects.filter(gpu=gpu).order_by("bucket").values_list("bucket", "count"))
    assert [count for _, count in got] == [6, 6]


def test_hours_go_into_their_months_chunk_a_day_at_a_time(require_postgres):
    """A month's hours in one row: each run adds the days now before the cutoff, none after it;
    the days still raw and the month's chunk read as one."""
    gpu = GpuFactory()
    month = NOON.replace(day=1, hour=0) - dt.timedelta(days=40)
    month = month.replace(day=1)
    for day in (3, 4, 20):
        _rolled_up(gpu, month.replace(day=day, hour=10), 720)  # two hours a day
    hours = _all(gpu)[1]
    assert len(hours) == 6
    # the cutoff: the 4th at 00:00 (READINGS_COMPRESS_AFTER_HOURS before now, down to a day)
    now = month.replace(day=4, hour=12) + dt.timedelta(hours=settings.READINGS_COMPRESS_AFTER_HOURS)
    assert rollup_chunks.rollups_compress(now=now)["rollups_1h"] == 2
    assert _chunks("telemetry_rollup1h_chunk", gpu.pk) == [(month, 2)] and Rollup1h.objects.filter(gpu=gpu).count() == 4
    assert _all(gpu)[1] == hours
    assert rollup_chunks.rollups_compress(now=NOON)["rollups_1h"] == 4
    assert _chunks("telemetry_rollup1h_chunk", gpu.pk) == [(month, 6)] and not Rollup1h.objects.filter(gpu=gpu).exists()
    assert _all(gpu)[1] == hours
    window = rollups_of(gpu_ids=[gpu.pk], resolution="1h", columns=("bucket", "count"),
                        start=month.replace(day=4), end=month.replace(day=21))  # fmt: skip
    assert window == [(row[0], row[1]) for row in hours[2:]]


def _index_bytes(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_indexes_size(%s)", [table])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_day_compressed_leaves_no_emptied_index_pages_behind(require_postgres):
    """The raw rows a run took go with their index pages: the indexes are rebuilt (concurrently,
    as beat's job runs outside a transaction), not left at the table's high-water mark."""
    start = (NOON - 3 * DAY).replace(hour=0)
    for gpu in (GpuFactory(), GpuFactory()):
        _rolled_up(gpu, start, 1440, step=dt.timedelta(minutes=1))
    empty = 2 * 8192 * 2  # two indexes (id, (gpu, bucket)): a metapage and a root each
    full = _index_bytes("telemetry_rollup1m")
    assert full > 4 * empty
    assert rollup_chunks.rollups_compress(now=NOON)["rollups_1m"] == 2 * 1440
    assert Rollup1m.objects.count() == 0
    assert _index_bytes("telemetry_rollup1m") <= empty
