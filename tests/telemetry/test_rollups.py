"""1-minute and 1-hour rollups: right for a known series (expected values computed here from the
generated readings), idempotent, and updated by a late batch for an already rolled-up minute."""

import datetime as dt
from collections import defaultdict

import pytest
from django.utils import timezone

from portal.telemetry.models import ROLLUP_METRICS, THROTTLE_BIT, Rollup1h, Rollup1m, StageDone
from tests.pipeline import rollups_process_pending, stage_waiting
from tests.telemetry.batches import gpu_uuid, iso, make_batch, make_reading

pytestmark = pytest.mark.django_db

A, B = gpu_uuid(1), gpu_uuid(2)
THERMAL = ("hw_thermal", "sw_thermal", "hw_slowdown")


def series_start() -> dt.datetime:
    """Four minutes before an hour boundary, a few hours ago: the series spans two hours."""
    hour = (timezone.now() - dt.timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    return hour - dt.timedelta(minutes=4)


def generate(uuid: str, start: dt.datetime, count: int, every: dt.timedelta, seed: int = 0) -> list[dict]:
    """A deterministic, irregular series with nulls (some of them transient) and throttling."""
    readings = []
    for i in range(count):
        n = i + seed
        ts = start + every * i
        reasons = [["sw_power_cap"], ["hw_thermal"], [], ["sw_thermal", "gpu_idle"], ["hw_slowdown"], None][n % 6]
        readings.append(
            make_reading(
                uuid, ts,
                temperature_c=None if n % 7 == 3 else 40 + (n * 7) % 45,  # transient nulls
                fan_speed_pct=None,  # not supported on this GPU
                power_w=100 + (n % 17) * 12.5,
                energy_mj=1000.0 + n * 250.0,
                utilization_gpu_pct=(n * 13) % 101,
                utilization_memory_pct=None if n % 5 == 0 else (n * 3) % 90,
                memory_used_mib=1000 + (n * 97) % 5000,
                sm_clock_mhz=1200 + (n % 9) * 50,
                mem_clock_mhz=2619 if n % 2 else 3201,
                throttle_reasons=reasons,
                xid_events=[{"ts": iso(ts), "code": 79}] * (n % 4 == 1) + [{"ts": iso(ts), "code": 48}] * (n % 8 == 1),
            )
        )  # fmt: skip
    return readings


def parse(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def expected_buckets(readings: list[dict], width: dt.timedelta) -> dict[dt.datetime, dict]:
    groups = defaultdict(list)
    for reading in readings:
        ts = parse(reading["ts"])
        bucket = ts - dt.timedelta(minutes=ts.minute % (width // dt.timedelta(minutes=1)), seconds=ts.second,
                                   microseconds=ts.microsecond)  # fmt: skip
        groups[bucket].append(reading)
    result = {}
    for bucket, rows in groups.items():
        values = {
            "count": len(rows),
            "thermal_throttle_count": sum(1 for r in rows if set(r["throttle_reasons"] or ()) & set(THERMAL)),
            "xid_count": sum(len(r["xid_events"]) for r in rows),
            "energy_mj_max": max(r["energy_mj"] for r in rows),
        }  # fmt: skip
        for metric in ROLLUP_METRICS:
            known = [r[metric] for r in rows if r[metric] is not None]
            values[f"{metric}_min"] = min(known) if known else None
            values[f"{metric}_max"] = max(known) if known else None
            values[f"{metric}_mean"] = sum(known) / len(known) if known else None
        result[bucket] = values
    return result


def stored_buckets(model, uuid: str) -> dict[dt.datetime, dict]:
    fields = ["count", "thermal_throttle_count", "xid_count", "energy_mj_max"]
    fields += [f"{m}_{s}" for m in ROLLUP_METRICS for s in ("min", "max", "mean")]
    return {row.pop("bucket"): row for row in model.objects.filter(gpu__uuid=uuid).values("bucket", *fields)}


def assert_rollups_match(model, uuid, readings, width):
    expected, stored = expected_buckets(readings, width), stored_buckets(model, uuid)
    assert sorted(stored) == sorted(expected)
    for bucket, values in expected.items():
        for name, value in values.items():
            got = stored[bucket][name]
            if value is None:
                assert got is None, (bucket, name)
            else:
                assert got == pytest.approx(value, rel=1e-5), (bucket, name, got, value)


def post_in_batches(agent, readings, size, gpus=(A, B)):
    for first in range(0, len(readings), size):
        batch = make_batch(agent.hostname, gpus=list(gpus), readings=0)
        batch["readings"] = readings[first : first + size]
        response = agent.post(batch)
        assert response.status_code == 202, response.content


def test_minute_and_hour_rollups_of_a_known_series(agent):
    start = series_start()
    series_a = generate(A, start + dt.timedelta(seconds=3), 60, dt.timedelta(seconds=7))  # 7 min, two hours
    series_b = generate(B, start, 20, dt.timedelta(seconds=13), seed=5)
    readings = sorted(series_a + series_b, key=lambda r: r["ts"])
    post_in_batches(agent, readings, 25)

    assert rollups_process_pending() == 4
    assert stage_waiting("rollups") == 0

    assert_rollups_match(Rollup1m, A, series_a, dt.timedelta(minutes=1))
    assert_rollups_match(Rollup1m, B, series_b, dt.timedelta(minutes=1))
    assert_rollups_match(Rollup1h, A, series_a, dt.timedelta(hours=1))
    assert_rollups_match(Rollup1h, B, series_b, dt.timedelta(hours=1))
    # the series was built to exercise these: two hours, thermal throttling, XIDs, all-null fan
    hours = stored_buckets(Rollup1h, A)
    assert len(hours) == 2
    assert sum(h["thermal_throttle_count"] for h in hours.values()) == 30
    assert sum(h["xid_count"] for h in hours.values()) == 15 + 8
    assert all(h["fan_speed_pct_mean"] is None for h in hours.values())


def test_thermal_throttle_count_counts_thermal_reasons_only(agent):
    start = series_start()
    cases = [["hw_thermal"], ["sw_thermal"], ["hw_slowdown"], ["sw_power_cap"], ["gpu_idle", "hw_power_brake"], [],
             None, ["sw_thermal", "hw_thermal", "sw_power_cap"]]  # fmt: skip
    readings = [make_reading(A, start + dt.timedelta(seconds=5 * i), throttle_reasons=r) for i, r in enumerate(cases)]
    post_in_batches(agent, readings, 10, gpus=[A])
    rollups_process_pending()
    minute = Rollup1m.objects.get(gpu__uuid=A)
    assert (minute.count, minute.thermal_throttle_count) == (8, 4)
    assert THROTTLE_BIT["sw_power_cap"] not in (THROTTLE_BIT[name] for name in THERMAL)
    assert Rollup1h.objects.get(gpu__uuid=A).thermal_throttle_count == 4


def test_rolling_up_twice_changes_nothing(agent):
    start = series_start()
    readings = generate(A, start, 40, dt.timedelta(seconds=11))
    post_in_batches(agent, readings, 15, gpus=[A])
    assert rollups_process_pending() == 3
    minutes, hours = stored_buckets(Rollup1m, A), stored_buckets(Rollup1h, A)
    ids = sorted(Rollup1m.objects.values_list("pk", flat=True))

    assert rollups_process_pending() == 0
    # processing batches again, after they are marked undone (a crash before the mark)
    StageDone.objects.filter(stage="rollups").delete()
    assert rollups_process_pending() == 3

    assert stored_buckets(Rollup1m, A) == minutes
    assert stored_buckets(Rollup1h, A) == hours
    assert sorted(Rollup1m.objects.values_list("pk", flat=True)) == ids


def test_a_late_batch_updates_an_already_rolled_up_minute(agent):
    start = series_start()
    first = generate(A, start, 30, dt.timedelta(seconds=10))
    post_in_batches(agent, first, 30, gpus=[A])
    rollups_process_pending()
    assert_rollups_match(Rollup1m, A, first, dt.timedelta(minutes=1))
    before = Rollup1m.objects.get(gpu__uuid=A, bucket=start + dt.timedelta(minutes=1))

    # the spool delivers readings for minutes 1 and 3 (and a hot outlier) later
    late = [
        make_reading(A, start + dt.timedelta(minutes=1, seconds=5), temperature_c=99, power_w=900.0,
                     throttle_reasons=["hw_thermal"], xid_events=[{"ts": iso(start), "code": 31}]),
        make_reading(A, start + dt.timedelta(minutes=3, seconds=59), temperature_c=20, power_w=50.0),
    ]  # fmt: skip
    post_in_batches(agent, late, 10, gpus=[A])
    assert rollups_process_pending() == 1

    assert_rollups_match(Rollup1m, A, first + late, dt.timedelta(minutes=1))
    assert_rollups_match(Rollup1h, A, first + late, dt.timedelta(hours=1))
    minute = Rollup1m.objects.get(gpu__uuid=A, bucket=start + dt.timedelta(minutes=1))
    assert (before.count, before.temperature_c_max < 99) == (6, True)
    assert (minute.count, minute.temperature_c_max, minute.power_w_max) == (7, 99, 900.0)
    assert minute.xid_count == before.xid_count + 1
    assert minute.thermal_throttle_count == before.thermal_throttle_count + 1


def test_rollups_of_one_host_leave_other_hosts_alone(agent, other_agent):
    start = series_start()
    post_in_batches(agent, generate(A, start, 10, dt.timedelta(seconds=5)), 10, gpus=[A])
    assert rollups_process_pending() == 1
    assert set(Rollup1m.objects.values_list("gpu__uuid", flat=True)) == {A}
    post_in_batches(other_agent, generate(B, start, 10, dt.timedelta(seconds=5), seed=3), 10, gpus=[B])
    assert rollups_process_pending() == 1
    assert set(Rollup1m.objects.values_list("gpu__uuid", flat=True)) == {A, B}


# Outside a transaction (as in the worker) a pass on SQLite aggregates before it takes the write
# lock and writes in a short transaction of its own: the same figures, late batches included.
@pytest.mark.django_db(transaction=True)
def test_a_pass_outside_a_transaction_gives_the_same_rollups(agent, pipeline_held):
    test_minute_and_hour_rollups_of_a_known_series(agent)
    assert rollups_process_pending() == 0


@pytest.mark.django_db(transaction=True)
def test_a_pass_outside_a_transaction_takes_a_late_batch(agent, pipeline_held):
    test_a_late_batch_updates_an_already_rolled_up_minute(agent)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_pass_finding_another_running_leaves_at_once(agent, require_postgres, pipeline_held):
    """Two pipeline tasks at once: the second leaves rather than hold a worker process for the whole
    of the first pass (the first looks for what is pending after it lets go)."""
    import time

    import psycopg
    from django.db import connection

    from portal.core.locks import advisory_key

    series = generate(A, series_start(), 30, dt.timedelta(seconds=5))
    post_in_batches(agent, series, 10)
    settings = connection.settings_dict
    other = psycopg.connect(
        host=settings["HOST"] or None, port=settings["PORT"] or None, user=settings["USER"],
        dbname=settings["NAME"], password=settings["PASSWORD"] or None, autocommit=True,
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '10s'")  # a pass that waits fails, not hangs
    try:
        other.execute("SELECT pg_advisory_lock(%s)", [advisory_key("pipeline")])  # a pass running elsewhere
        started = time.monotonic()
        assert rollups_process_pending() == 0
        assert time.monotonic() - started < 5  # did not wait for the other pass
        assert stage_waiting("rollups") == 3  # left for the running pass
        other.execute("SELECT pg_advisory_unlock(%s)", [advisory_key("pipeline")])
        assert rollups_process_pending() == 3
        assert stage_waiting("rollups") == 0
        assert_rollups_match(Rollup1m, A, series, dt.timedelta(minutes=1))
    finally:
        other.close()
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 0")
