"""Rollups from the pass's readings and hours from minutes are what an aggregate over
the raw readings gives: every minute and hour row against a direct SQL aggregate of the readings
table, after batches with nulls, stored out of order, in passes of a few batches, with late ones
into minutes and an hour already rolled up. Runs on the database the tests run on (SQLite, or
PostgreSQL with DATABASE_URL)."""

import datetime as dt
import importlib
import random
from types import SimpleNamespace

import pytest
from django.db import connection
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.telemetry.models import ROLLUP_METRICS, THERMAL_THROTTLE_MASK, Reading, Rollup1h, Rollup1m
from tests.pipeline import rollups_process_pending, stage_waiting
from tests.telemetry.batches import gpu_uuid, iso, make_batch, make_reading

pytestmark = pytest.mark.django_db

A, B = gpu_uuid(1), gpu_uuid(2)
HEAD = ["count", "thermal_throttle_count", "xid_count", "energy_mj_max"]


def reading(uuid: str, ts: dt.datetime, n: int) -> dict:
    """Values with nulls of every kind: a metric never known, one now and then, one in runs."""
    return make_reading(
        uuid, ts,
        temperature_c=None if n % 7 == 3 else 30 + (n * 7) % 60,
        fan_speed_pct=None,
        power_w=None if (n // 9) % 4 == 1 else 90.5 + (n % 23) * 13.37,
        energy_mj=None if n % 11 == 0 else 1000.0 + n * 3.3,
        utilization_gpu_pct=(n * 13) % 101,
        utilization_memory_pct=None if n % 5 == 0 else (n * 3) % 90,
        memory_used_mib=None if n % 13 == 4 else 1000 + (n * 97) % 80000,
        sm_clock_mhz=1200 + (n % 9) * 50,
        mem_clock_mhz=None if n % 2 else 3201,
        throttle_reasons=[["hw_thermal"], [], ["sw_power_cap"], None, ["sw_thermal", "gpu_idle"]][n % 5],
        xid_events=[{"ts": iso(ts), "code": 79}] * (n % 17 == 1),
    )  # fmt: skip


def series(uuid: str, start: dt.datetime, every: dt.timedelta, count: int, seed: int) -> list[dict]:
    return [reading(uuid, start + every * i, i + seed) for i in range(count)]


def post(agent, readings: list[dict]) -> None:
    batch = make_batch(agent.hostname, gpus=[A, B], readings=0)
    batch["readings"] = sorted(readings, key=lambda r: r["ts"])
    response = agent.post(batch)
    assert response.status_code == 202, response.content


def raw_aggregates(width: str) -> dict[tuple, dict]:
    """(GPU id, bucket) → the figures of its readings, straight from the readings table."""
    if connection.vendor == "postgresql":
        bucket = f"date_trunc('{width}', ts)"
    else:
        bucket = "substr(ts, 1, 16) || ':00'" if width == "minute" else "substr(ts, 1, 13) || ':00:00'"
    columns = [
        "COUNT(*)",
        f"COUNT(CASE WHEN (throttle_reasons & {THERMAL_THROTTLE_MASK}) > 0 THEN 1 END)",
        "SUM(xid_count)",
        "MAX(energy_mj)",
    ]
    names = list(HEAD)
    for metric in ROLLUP_METRICS:
        columns += [f"MIN({metric})", f"MAX({metric})", f"AVG({metric})", f"COUNT({metric})"]
        names += [f"{metric}_{stat}" for stat in ("min", "max", "mean", "count")]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT gpu_id, {bucket}, {', '.join(columns)} FROM {Reading._meta.db_table} GROUP BY gpu_id, {bucket}"
        )
        rows = cursor.fetchall()
    out = {}
    for gpu_id, key, *values in rows:
        if isinstance(key, str):
            key = dt.datetime.fromisoformat(key).replace(tzinfo=dt.UTC)
        out[gpu_id, key] = dict(zip(names, values, strict=True))
    return out


def assert_rollups_are_raw_aggregates(model, width: str) -> int:
    expected = raw_aggregates(width)
    fields = [name for name in next(iter(expected.values())) if model is Rollup1m or not name.endswith("_count")]
    fields = list(dict.fromkeys(HEAD + fields))
    stored = {(row.pop("gpu_id"), row.pop("bucket")): row for row in model.objects.values("gpu_id", "bucket", *fields)}
    assert sorted(stored) == sorted(expected)
    for key, values in expected.items():
        for name in fields:
            want, got = values[name], stored[key][name]
            if want is None:
                assert got is None, (key, name, got)
            elif name.endswith("_mean"):
                # Means are stored as 4-byte floats on PostgreSQL.
                assert got == pytest.approx(float(want), rel=1e-6), (key, name, got, want)
            else:
                assert got == want, (key, name, got, want)
    return len(expected)


def test_minutes_and_hours_equal_the_raw_aggregates_whatever_order_batches_come_in(agent):
    hour = (timezone.now() - dt.timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    start = hour - dt.timedelta(minutes=20)  # three hours
    readings = series(A, start + dt.timedelta(seconds=1.5), dt.timedelta(seconds=7), 1000, 0)
    readings += series(B, start, dt.timedelta(seconds=11), 600, 5)
    readings.sort(key=lambda r: r["ts"])
    # Held back, for the end: every fifth reading of the first hour (their minutes and hour are
    # rolled up by then), and a few single readings into the middle of old minutes.
    first_hour = [r for r in readings if r["ts"] < iso(hour)]
    late = first_hour[::5]
    single = [first_hour[31], first_hour[77], readings[400]]
    held = {id(r) for r in late + single}
    readings = [r for r in readings if id(r) not in held]

    rng = random.Random(23)
    batches, i = [], 0
    while i < len(readings):
        size = rng.choice([1, 3, 8, 20, 45])
        batches.append(readings[i : i + size])
        i += size
    rng.shuffle(batches)
    for number, batch in enumerate(batches):
        post(agent, batch)
        if number % 4 == 3:
            rollups_process_pending(limit=rng.choice([1, 2, 3]))
    rollups_process_pending()
    assert_rollups_are_raw_aggregates(Rollup1h, "hour")

    post(agent, late)  # one batch across the whole first hour
    for one in single:
        post(agent, [one])
    assert rollups_process_pending() == 1 + len(single)
    assert stage_waiting("rollups") == 0

    assert assert_rollups_are_raw_aggregates(Rollup1m, "minute") > 150
    assert assert_rollups_are_raw_aggregates(Rollup1h, "hour") == 6  # two GPUs, three hours each


def test_a_minute_split_between_passes_keeps_the_readings_of_each(agent):
    """Three batches in one minute, each rolled up on its own, the middle one last: every pass
    reads the parts of the minute its batch leaves out."""
    minute = (timezone.now() - dt.timedelta(hours=2)).replace(second=0, microsecond=0)
    parts = [series(A, minute + dt.timedelta(seconds=s), dt.timedelta(seconds=2), 5, s) for s in (0, 40, 20)]
    for part in parts:
        post(agent, part)
        assert rollups_process_pending() == 1
    row = Rollup1m.objects.get(gpu__uuid=A, bucket=minute)
    assert row.count == 15
    assert row.temperature_c_count == sum(r["temperature_c"] is not None for part in parts for r in part)
    assert_rollups_are_raw_aggregates(Rollup1m, "minute")
    assert_rollups_are_raw_aggregates(Rollup1h, "hour")


def test_the_migration_fills_in_the_counts_of_stored_minutes(agent):
    start = (timezone.now() - dt.timedelta(hours=3)).replace(second=0, microsecond=0)
    post(agent, series(A, start, dt.timedelta(seconds=5), 40, 0) + series(B, start, dt.timedelta(seconds=9), 20, 3))
    rollups_process_pending()
    gpu = Gpu.objects.get(uuid=A)
    # A minute whose readings are gone: its counts come from its means.
    Rollup1m.objects.create(gpu=gpu, bucket=start - dt.timedelta(days=30), count=4, power_w_mean=100.0)
    Rollup1m.objects.update(**{f"{metric}_count": 0 for metric in ROLLUP_METRICS})

    migration = importlib.import_module("portal.telemetry.migrations.0006_rollup_counts")
    migration.fill_counts(None, SimpleNamespace(connection=connection))

    old = Rollup1m.objects.get(bucket=start - dt.timedelta(days=30))
    assert (old.power_w_count, old.temperature_c_count) == (4, 0)
    old.delete()
    assert_rollups_are_raw_aggregates(Rollup1m, "minute")
