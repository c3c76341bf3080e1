"""Wear and /metrics benchmark (issue 16), in one run on a scratch PostgreSQL database bench_wear.

1. `GET /api/v1/gpus/{uuid}/wear` for a GPU with a year of 1 Hz readings behind its meters
   (8,760 hour rows computed by the portal's own meter code from 1 Hz hours: load cycles, idle
   stretches, temperature swings and wiggles), the whole life and arbitrary from/to (partial hours
   from raw readings). Target: < 100 ms.
2. `GET /metrics` for 1,000 GPUs (100 hosts, latest readings, records, tickets, wear states).
   Target: < 500 ms.
3. Ingest throughput with and without the wear meters, side by side in one run (alternating
   rounds of the same batches through `reading_batch_ingest`; with meters, the wear hook and its
   debounced update run in the same process, so their cost shows in the throughput).
   Target: meters cost < 10 % of ingest throughput.

Run with `make bench-wear` (needs the local PostgreSQL; BENCH_PG_URL to use another).
"""

import datetime as dt
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DB_NAME = "bench_wear"
DB_URL = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + DB_NAME
YEAR_HOURS = 24 * 365
INGEST_ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
INGEST_BATCHES = int(os.environ.get("BENCH_BATCHES", "800"))  # per round (~10 s: the debounce interval)
GPUS_PER_HOST = 10
READINGS_PER_GPU = 10


def setup():
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    os.environ.update(
        DATABASE_URL=DB_URL, DEBUG="true", DJANGO_SETTINGS_MODULE="portal.settings", LOG_LEVEL="WARNING",
        DATABASE_CONN_MAX_AGE="600", METRICS_TOKEN="bench-metrics-token", ALLOWED_HOSTS="testserver,127.0.0.1",
    )  # fmt: skip
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _timed(fn, runs: int) -> tuple[float, float]:
    fn()  # warm
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


def _hour_of_readings(rng: random.Random, start: float, kind: int) -> list[tuple]:
    """3,600 readings of one hour at 1 Hz: (ts, temp, fan, power, energy, util)."""
    out, energy, temp = [], 1e9, 45.0
    busy = kind % 3 != 0
    for i in range(3600):
        if i % 600 == 0:
            busy = rng.random() < 0.7
        target = 84.0 if busy else 38.0
        temp += (target - temp) * 0.02 + rng.uniform(-1.5, 1.5)
        power = (650.0 if busy else 90.0) + rng.uniform(-20, 20)
        energy += power * 1000
        util = rng.choice([97, 100, 99]) if busy else rng.choice([0, 3, 40])
        fan = 85 if temp > 75 else 45
        out.append((start + i, round(temp), fan, power, energy, util))
    return out


def build_year(gpu, rng):
    """8,760 hour rows from 48 distinct 1 Hz hours, cycle state chained like the portal does."""
    from portal.wear import meters
    from portal.wear.models import WearHour, WearState
    from portal.wear.services import _days_refresh, _fill

    hot_c = meters.hot_threshold(gpu.temp_slowdown_c)
    base = meters.hour_of(time.time()) - YEAR_HOURS * 3600
    templates = []
    for kind in range(48):
        readings = _hour_of_readings(rng, 0.0, kind)
        bucket = meters.buckets_from(readings, readings[0], hot_c)[0]
        templates.append(bucket)
    rows, cycles = [], meters.Hysteresis()
    totals = dict.fromkeys(("powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj"), 0.0)
    for h in range(YEAR_HOURS):
        bucket = templates[rng.randrange(len(templates))]
        row = WearHour(gpu=gpu, hour=dt.datetime.fromtimestamp(base + h * 3600, tz=dt.UTC))
        _fill(row, bucket)
        for _, temp in bucket.turns.points:
            cycles.push(temp)
        row.cycles_high, row.cycles_ref, row.cycles_total = cycles.high, cycles.ref, cycles.count
        for name in totals:
            totals[name] += getattr(bucket, name)
        rows.append(row)
    WearHour.objects.bulk_create(rows, batch_size=2000)
    _days_refresh(gpu.pk, {base + d * 86400 - (base % 86400) for d in range(366)})
    last_start = base + (YEAR_HOURS - 1) * 3600
    WearState.objects.create(
        gpu=gpu, last_ts=dt.datetime.fromtimestamp(last_start + 3599, tz=dt.UTC), last_reading=[last_start + 3599],
        first_hour=dt.datetime.fromtimestamp(base, tz=dt.UTC), cycles_total=cycles.count, **totals,
    )  # fmt: skip
    return base


def bench_wear_query(results):
    from django.test import Client

    from portal.accounts.roles import ROLE_VIEWER
    from portal.fleet.models import Gpu, Host
    from portal.telemetry.models import Reading
    from tests.factories import UserFactory

    rng = random.Random(16)
    host = Host.objects.create(hostname="year-host")
    gpu = Gpu.objects.create(host=host, uuid="GPU-year-0000", index=0, temp_slowdown_c=90)
    base = build_year(gpu, rng)
    # raw readings for the last two hours (inside raw retention), for the partial hours
    edge_start = base + (YEAR_HOURS - 2) * 3600
    raw = _hour_of_readings(rng, edge_start, 1) + _hour_of_readings(rng, edge_start + 3600, 2)
    Reading.objects.bulk_create(
        [Reading(gpu=gpu, ts=dt.datetime.fromtimestamp(r[0], tz=dt.UTC), temperature_c=r[1], fan_speed_pct=r[2],
                 power_w=r[3], energy_mj=r[4], utilization_gpu_pct=r[5]) for r in raw], batch_size=5000,
    )  # fmt: skip
    client = Client()
    client.force_login(UserFactory(username="bench-viewer", role=ROLE_VIEWER))
    url = f"/api/v1/gpus/{gpu.uuid}/wear"

    def iso(seconds):
        return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).isoformat()

    def whole():
        assert client.get(url).status_code == 200

    arbitrary = {"from": iso(base + 1234.5), "to": iso(edge_start + 3600 + 1817.25)}

    def ranged():
        assert client.get(url, arbitrary).status_code == 200

    results["wear_year_ms"] = _timed(whole, 15)
    results["wear_year_arbitrary_ms"] = _timed(ranged, 15)
    print(f"wear, a year of 1 Hz (8,760 hours), whole life: median {results['wear_year_ms'][0]:.1f} ms, "
          f"max {results['wear_year_ms'][1]:.1f} ms (target < 100 ms)")  # fmt: skip
    print(f"wear, a year, arbitrary from/to (raw partial hours): median {results['wear_year_arbitrary_ms'][0]:.1f} ms,"
          f" max {results['wear_year_arbitrary_ms'][1]:.1f} ms (target < 100 ms)")  # fmt: skip


def bench_metrics(results):
    from django.test import Client
    from django.utils import timezone

    from portal.fleet.models import Gpu, Host, MaintenanceRecord
    from portal.telemetry.models import GpuLatest
    from portal.wear.models import WearState

    now = timezone.now()
    hosts = Host.objects.bulk_create([Host(hostname=f"m-host-{i:03d}") for i in range(100)])
    gpus = Gpu.objects.bulk_create(
        [Gpu(host=h, uuid=f"GPU-m-{h.pk}-{i}", index=i, model_name="NVIDIA H200") for h in hosts for i in range(10)]
    )
    GpuLatest.objects.bulk_create([
        GpuLatest(gpu=g, ts=now, received_at=now, temperature_c=60, power_w=400.0, utilization_gpu_pct=90)
        for g in gpus
    ])  # fmt: skip
    WearState.objects.bulk_create([
        WearState(gpu=g, last_ts=now, last_reading=[now.timestamp()], first_hour=now, hot_s=100.0, busy_s=2000.0,
                  cycles_total=12, energy_mj=5e9)
        for g in gpus
    ])  # fmt: skip
    kinds = ["cleaning", "driver_update", "connection_check", "inspection"]
    MaintenanceRecord.objects.bulk_create([
        MaintenanceRecord(kind=kinds[i % 4], host=g.host, gpu=g, performed_at=now - dt.timedelta(days=i % 90),
                          performed_by="bench")
        for i, g in enumerate(gpus)
    ])  # fmt: skip
    client = Client()
    headers = {"HTTP_AUTHORIZATION": "Bearer bench-metrics-token"}

    def scrape():
        answer = client.get("/metrics", **headers)
        assert answer.status_code == 200, answer.status_code

    results["metrics_ms"] = _timed(scrape, 10)
    print(f"/metrics, 1,000 GPUs: median {results['metrics_ms'][0]:.1f} ms, max {results['metrics_ms'][1]:.1f} ms "
          "(target < 500 ms)")  # fmt: skip


def bench_ingest_overhead(results):
    from django.conf import settings

    from portal.telemetry import hooks
    from portal.telemetry.schemas import BatchIn
    from portal.telemetry.services import host_token_issue
    from portal.telemetry.services.ingest import reading_batch_ingest
    from portal.wear import enqueue
    from portal.wear.services import wear_update_many

    settings.CELERY_TASK_ALWAYS_EAGER = False  # the portal's own WEAR_DEBOUNCE_S applies

    class InlineTask:  # the worker's share of the work, done in this process (so it counts)
        @staticmethod
        def delay(ranges):
            from django.db import connection

            wear_update_many(ranges={int(k): tuple(v) for k, v in ranges.items()})
            connection.close()

    enqueue.wear_update_task = InlineTask
    wear_consumer = [entry for entry in hooks._consumers if entry[0] == "wear"]
    hooks._consumers[:] = []  # ingest alone: no live, no evaluation on either side

    issued = host_token_issue(hostname="ingest-host", label="bench", create_host=True)
    host = issued.record.host
    from tests.telemetry.batches import make_batch

    uuids = [f"GPU-ingest-{i:04d}" for i in range(GPUS_PER_HOST)]
    clock = [time.time() - 20 * 3600]  # 1 Hz per GPU: the runs cover about 14 hours

    def batch():
        clock[0] += READINGS_PER_GPU
        now = dt.datetime.fromtimestamp(clock[0], tz=dt.UTC)
        body = make_batch(host.hostname, gpus=uuids, readings=GPUS_PER_HOST * READINGS_PER_GPU, now=now)
        return BatchIn.model_validate_json(json.dumps(body))

    reading_batch_ingest(host=host, batch=batch())  # inventory
    rates = {"without": [], "with": []}
    for round_ in range(INGEST_ROUNDS * 2):
        side = "with" if round_ % 2 else "without"
        hooks._consumers[:] = wear_consumer if side == "with" else []
        batches = [batch() for _ in range(INGEST_BATCHES)]
        start = time.perf_counter()
        for b in batches:
            reading_batch_ingest(host=host, batch=b)
        if side == "with":
            enqueue._flush()  # the last pending update belongs to this round
            if enqueue._timer is not None:
                enqueue._timer.cancel()
        elapsed = time.perf_counter() - start
        rates[side].append(INGEST_BATCHES * GPUS_PER_HOST * READINGS_PER_GPU / elapsed)
    without, with_ = statistics.median(rates["without"]), statistics.median(rates["with"])
    results["ingest_overhead_pct"] = (1 - with_ / without) * 100
    print(f"ingest, in process (PostgreSQL): {without:,.0f} readings/s without meters, {with_:,.0f} with: "
          f"meters cost {results['ingest_overhead_pct']:.1f} % (target < 10 %)")  # fmt: skip


def main():
    setup()
    results = {}
    parts = sys.argv[1:] or ["wear", "metrics", "ingest"]
    if "wear" in parts:
        bench_wear_query(results)
    if "metrics" in parts:
        bench_metrics(results)
    if "ingest" in parts:
        bench_ingest_overhead(results)
    if len(parts) < 3:
        return 0
    ok = (
        results["wear_year_ms"][0] < 100
        and results["wear_year_arbitrary_ms"][0] < 100
        and results["metrics_ms"][0] < 500
        and results["ingest_overhead_pct"] < 10
    )
    print("verdict:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
