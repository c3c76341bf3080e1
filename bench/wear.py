"""Wear and /metrics benchmark, in one run on scratch PostgreSQL databases.

1. `GET /api/v1/gpus/{uuid}/wear` for a GPU with a year of 1 Hz readings behind its meters
   (8,760 hour rows computed by the portal's own meter code from 1 Hz hours: load cycles, idle
   stretches, temperature swings and wiggles), the whole life and arbitrary from/to (partial hours
   from raw readings). Target: < 100 ms. (Database bench_wear.)
2. `GET /metrics` for 1,000 GPUs (100 hosts, latest readings, records, tickets, wear states).
   Target: < 500 ms.
3. Ingest throughput with the wear meters on and off, side by side in one run, the whole pipeline
   as a lab runs it: `manage.py run --workers 2` (PostgreSQL, Redis db 12: two Daphne processes,
   the Celery worker, beat on its real schedule) on a fresh copy of a prepared database each round
   (bench_wear_round from bench_wear_ingest), 8 clients posting 100-reading gzip batches (20 hosts,
   200 GPUs at 10 Hz) for BENCH_ROUND_S (45) seconds; BENCH_ROUNDS (3) rounds per side, off and on
   alternating. Off: the portal runs with bench/settings_wear_off.py, whose bench-only app takes
   the wear stage out of the pipeline. The figure: median readings/s accepted while posting, on
   against off; the pipeline's passes run on the same 2 cores meanwhile, so the meters' cost shows.
   With the meters on, the round also waits until the wear stage has finished every batch and
   prints how long after the last post that was (the contract: readings stored more than a minute
   ago count). Target: cost < 10 %.

Run with `make bench-wear` (under `flock /work/wt/bench.lock` on a shared machine; needs the local
PostgreSQL and Redis; BENCH_PG_URL, BENCH_WEAR_REDIS_URL to use others). `python bench/wear.py
ingest` (or wear, metrics) runs one part.
"""

import datetime as dt
import http.client
import json
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import batch_body, host_inventory, ingest_post  # noqa: E402
from portal.ops.supervise import ChildFailed, free_port, wait_until_answers  # noqa: E402

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DB_NAME = "bench_wear"
DB_URL = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + DB_NAME
YEAR_HOURS = 24 * 365
INGEST_DB, ROUND_DB = "bench_wear_ingest", "bench_wear_round"
INGEST_DB_URL = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + INGEST_DB
ROUND_DB_URL = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + ROUND_DB
INGEST_REDIS_URL = os.environ.get("BENCH_WEAR_REDIS_URL", "redis://127.0.0.1:6379/12")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))  # per side
ROUND_S = float(os.environ.get("BENCH_ROUND_S", "45"))
HOSTS = 20
CLIENTS = 8
GPUS_PER_HOST = 10
READINGS_PER_GPU = 10
BATCHES_PER_HOST = int(os.environ.get("BENCH_BATCHES_PER_HOST", "400"))  # 800,000 readings: more than a round posts


def setup():
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    os.environ.update(
        DATABASE_URL=DB_URL, DEBUG="true", DJANGO_SETTINGS_MODULE="portal.settings", LOG_LEVEL="WARNING",
        DATABASE_CONN_MAX_AGE="600", METRICS_TOKEN="bench-metrics-token", ALLOWED_HOSTS="testserver,127.0.0.1",
    )  # fmt: skip
    os.environ.pop("REDIS_URL", None)
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
    """8,760 hour rows from 48 distinct 1 Hz hours, cycle state chained like the portal does, the
    days over packed as beat's hourly job packs them."""
    from portal.wear import meters
    from portal.wear.hours import wear_hours_fold
    from portal.wear.models import WearHour, WearState
    from portal.wear.services import wear_days_refresh, wear_row_fill

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
        wear_row_fill(row, bucket)
        for _, temp in bucket.turns.points:
            cycles.push(temp)
        row.cycles_high, row.cycles_ref, row.cycles_total = cycles.high, cycles.ref, cycles.count
        for name in totals:
            totals[name] += getattr(bucket, name)
        rows.append(row)
    WearHour.objects.bulk_create(rows, batch_size=2000)
    wear_days_refresh({gpu.pk: {base + d * 86400 - (base % 86400) for d in range(366)}})
    last_start = base + (YEAR_HOURS - 1) * 3600
    WearState.objects.create(
        gpu=gpu, last_ts=dt.datetime.fromtimestamp(last_start + 3599, tz=dt.UTC), last_reading=[last_start + 3599],
        first_hour=dt.datetime.fromtimestamp(base, tz=dt.UTC), cycles_total=cycles.count, **totals,
    )  # fmt: skip
    wear_hours_fold()  # as beat's hourly job: every day but the last two packed
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


def _simulated_year(gpu, rng, hours: int = YEAR_HOURS):
    """A year of hour rows through the portal's meters from the agent simulator's readings (a
    healthy GPU of a lab: training jobs, a reading every 10 s, timestamps in milliseconds as an
    agent sends them): 96 distinct simulated hours, each hour of the year one of them moved to its
    place, counted from its readings with the cycle state chained; the days over then packed."""
    from agents.simulate import SimulatedDeviceClient
    from portal.wear import meters
    from portal.wear.hours import wear_hours_fold
    from portal.wear.models import WearHour
    from portal.wear.services import wear_days_refresh, wear_row_fill

    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    base = meters.hour_of(time.time()) - hours * 3600
    clock = Clock()
    clock.now = base  # the simulator's jobs start from its clock's time at start
    client = SimulatedDeviceClient(count=1, scenarios=["healthy"], hostname=f"size-{gpu.pk}", clock=clock)
    templates = []  # readings of an hour as (ms into the hour, temp, fan, power, energy, util)
    for n in range(96):
        readings = []
        for i in range(360):
            ms = i * 10_000 + rng.randrange(0, 400)
            clock.now = base + n * 3600 + ms / 1000
            m = client.metrics(0)
            readings.append((ms, m["temperature_c"], m["fan_speed_pct"], m["power_w"], m["energy_mj"],
                             m["utilization_gpu_pct"]))  # fmt: skip
        templates.append(readings)
    hot_c = meters.hot_threshold(gpu.temp_slowdown_c)
    rows, cycles, prev = [], meters.Hysteresis(), None
    for h in range(hours):
        start_ms = (base + h * 3600) * 1000
        # epoch seconds from whole milliseconds, as datetime.timestamp() gives them
        readings = [((start_ms + r[0]) / 1000, *r[1:]) for r in templates[rng.randrange(len(templates))]]
        bucket = meters.buckets_from(readings, prev, hot_c)[base + h * 3600]
        prev = readings[-1]
        row = WearHour(gpu=gpu, hour=dt.datetime.fromtimestamp(base + h * 3600, tz=dt.UTC))
        wear_row_fill(row, bucket)
        for _, temp in bucket.turns.points:
            cycles.push(temp)
        row.cycles_high, row.cycles_ref, row.cycles_total = cycles.high, cycles.ref, cycles.count
        rows.append(row)
    WearHour.objects.bulk_create(rows, batch_size=2000)
    wear_days_refresh({gpu.pk: {base + d * 86400 - (base % 86400) for d in range(hours // 24 + 2)}})
    wear_hours_fold()


WEAR_TABLES = ("wear_wearhour", "wear_wearday")


def _wear_bytes() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in WEAR_TABLES:
            cursor.execute(f"VACUUM FULL ANALYZE {table}")  # as the rows would lie written once
        cursor.execute("SELECT sum(pg_total_relation_size(t)) FROM unnest(%s::regclass[]) t", [list(WEAR_TABLES)])
        return cursor.fetchone()[0]


def bench_wear_size(results):
    """Bytes on disk (heap, TOAST, indexes) of a year of wear meters per GPU, as beat's job keeps
    them (the days over packed), for build_year's hours and for the simulator's."""
    from portal.fleet.models import Gpu, Host
    from portal.wear.models import WearDay, WearHour, WearState

    rng = random.Random(35)
    for label, build in (("build_year's hours (wide swings)", build_year), ("the agent simulator's", _simulated_year)):
        for model in (WearHour, WearDay, WearState):
            model.objects.all().delete()
        for n in range(2):
            host = Host.objects.create(hostname=f"size-host-{label[:5]}-{n}")
            build(Gpu.objects.create(host=host, uuid=f"GPU-size-{label[:5]}-{n}", index=0, temp_slowdown_c=90), rng)
        per_gpu = _wear_bytes() / 2
        results[f"wear_size_{label[:5]}"] = per_gpu
        print(f"wear meters, a year per GPU, {label}: {per_gpu / 2**20:.3f} MiB ({per_gpu / 365:,.0f} bytes a day; "
              f"{WearHour.objects.count() / 2:.0f} hour rows left unpacked per GPU)")  # fmt: skip


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


def _admin(*statements: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _round_env(wear_on: bool, var_dir: Path) -> dict[str, str]:
    dropped = {"REDIS_URL", "DATABASE_URL", "DEBUG", "DJANGO_SETTINGS_MODULE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        VAR_DIR=str(var_dir), DEBUG="false", SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="127.0.0.1,localhost",
        PLAIN_HTTP="true", LOG_LEVEL="WARNING", DJANGO_SETTINGS_MODULE="bench.settings",
        DATABASE_URL=ROUND_DB_URL, DATABASE_CONN_MAX_AGE="600", REDIS_URL=INGEST_REDIS_URL,
    )  # fmt: skip
    if not wear_on:
        env["DJANGO_SETTINGS_MODULE"] = "bench.settings_wear_off"
    return env


def _reading(uuid_: str, ts: dt.datetime, step: int, temp: float) -> dict:
    busy = (step // 3000) % 3 != 0  # 5 minutes busy, 5 more, 5 idle (10 Hz)
    return {
        "gpu_uuid": uuid_, "ts": ts.isoformat(), "temperature_c": round(temp), "fan_speed_pct": 85 if busy else 40,
        "power_w": (640.0 if busy else 90.0) + step % 7, "power_limit_w": 700.0, "energy_mj": 1e9 + step * 37_000.0,
        "utilization_gpu_pct": 98 if busy else 2, "utilization_memory_pct": step % 60, "memory_used_mib": 40000,
        "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "pstate": 0, "throttle_reasons": [], "ecc_corrected_volatile": 0,
        "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0, "retired_pages_pending": False,
        "remapped_rows_pending": False, "remapped_rows_failure": False, "pcie_link_gen": 5, "pcie_link_width": 16,
        "pcie_replay_count": 0, "xid_events": [],
    }  # fmt: skip


def _bodies(hostname: str, count: int, start: dt.datetime) -> list[bytes]:
    """count batches of one host: 10 GPUs at 10 Hz, one second per batch (as bench/pipeline.py)."""
    rng = random.Random(hostname)
    inventory = host_inventory(hostname, GPUS_PER_HOST, uuid_prefix="wear-")
    uuids = [gpu["uuid"] for gpu in inventory]
    bodies = []
    temps = [rng.uniform(40, 80) for _ in uuids]
    for number in range(count):
        readings = []
        for step in range(READINGS_PER_GPU):
            ts = start + dt.timedelta(seconds=number + step / READINGS_PER_GPU)
            at = number * READINGS_PER_GPU + step
            target = 83.0 if (at // 3000) % 3 else 38.0
            for n, u in enumerate(uuids):
                # heating and cooling toward the load's temperature, the sensor flickering by a degree
                temps[n] += (target - temps[n]) * 0.002 + rng.uniform(-0.3, 0.3)
                readings.append(_reading(u, ts, at, temps[n]))
        bodies.append(batch_body(hostname, number, inventory, readings, ts))
    return bodies


class Client(threading.Thread):
    """Posts its hosts' batches (each host's in time order, the hosts in turn) until the deadline."""

    def __init__(self, port: int, work: list[tuple[str, bytes]], deadline: float):
        super().__init__(daemon=True)
        self.port, self.work, self.deadline = port, work, deadline
        self.accepted = self.batches = 0
        self.errors: dict[int | str, int] = {}
        self.first_post = self.last_answer = 0.0

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.first_post = time.monotonic()
        for token, body in self.work:
            if time.monotonic() >= self.deadline:
                break
            status, payload = ingest_post(conn, token, body)
            if status == 202:
                self.accepted += json.loads(payload)["accepted"]
                self.batches += 1
            else:
                self.errors[status] = self.errors.get(status, 0) + 1
        self.last_answer = time.monotonic()


def _progress(conn) -> dict[str, int]:
    """The round's pipeline: batches stored, and the batches each stage has not finished (the
    ledger above its cursor, as GET /api/v1/pipeline counts them)."""
    stored = conn.execute("SELECT count(*) FROM telemetry_ingestbatch").fetchone()[0]
    waiting = {}
    for stage in ("rules", "rollups", "wear"):
        waiting[stage] = conn.execute(
            "SELECT count(*) FROM telemetry_ingestbatch b WHERE b.id >= "
            "COALESCE((SELECT max(done_below) FROM telemetry_pipelinecursor), 0) AND NOT EXISTS "
            "(SELECT FROM telemetry_stagedone d WHERE d.batch_pk = b.id AND d.stage = %s)",
            [stage],
        ).fetchone()[0]
    return {"stored": stored, **waiting}


TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _kind(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    for word, kind in (("daphne", "web"), (" serve", "web"), ("worker", "worker"), ("beat", "beat")):
        if word in command:
            return kind
    return "other"


def _tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds of a process and its descendants (their reaped children's included), by kind:
    web (Daphne), worker, beat, other (the supervising `manage.py run`)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))):
            parents[int(entry)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier and pid not in tree]
        tree.update(frontier)
    total: dict[str, float] = {}
    for pid in tree:
        if fields := _stat(pid):
            kind = _kind(pid)
            total[kind] = total.get(kind, 0.0) + sum(int(value) for value in fields[11:15]) / TICKS
    return total


def _backends_cpu(conn) -> float:
    """CPU seconds of the PostgreSQL backends serving the round's database (this one's aside)."""
    pids = [row[0] for row in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (ROUND_DB,))]  # fmt: skip
    return sum(sum(int(value) for value in fields[11:13]) for pid in pids if (fields := _stat(pid))) / TICKS


def ingest_round(wear_on: bool, work: list[list[tuple[str, bytes]]]) -> dict:
    """One round on a fresh copy of the prepared database: `manage.py run --workers 2` (2 Daphne
    processes, the Celery worker, beat on its real schedule), the clients posting for ROUND_S."""
    import redis

    _admin(f"DROP DATABASE IF EXISTS {ROUND_DB} WITH (FORCE)", f"CREATE DATABASE {ROUND_DB} TEMPLATE {INGEST_DB}")
    redis.Redis.from_url(INGEST_REDIS_URL).flushdb()
    var_dir = Path(tempfile.mkdtemp(prefix="bench-wear-"))
    env = _round_env(wear_on, var_dir)
    port = free_port()
    log = var_dir / "portal.log"
    command = [sys.executable, "manage.py", "run", "--port", str(port), "--no-migrate", "--workers", "2"]
    env.setdefault("PORTAL_URL", f"http://127.0.0.1:{port}")
    with open(log, "wb") as out:
        portal = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)

    def check():
        if portal.poll() is not None:
            raise ChildFailed(f"the portal exited with {portal.returncode}:\n{log.read_text()[-3000:]}")

    try:
        wait_until_answers(f"http://127.0.0.1:{port}/healthz", check=check, timeout_s=120)
        time.sleep(3)  # worker and beat ready
        cpu_before = _tree_cpu(portal.pid)
        deadline = time.monotonic() + ROUND_S
        clients = [Client(port, items, deadline) for items in work if items]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        started = min(client.first_post for client in clients)
        posted = max(client.last_answer for client in clients)
        # the pipeline drains: every batch evaluated and rolled up, and with the meters on every
        # GPU's newest reading counted; then its CPU time, web server, worker, beat and database
        wear_lag = None
        accepted_batches = sum(client.batches for client in clients)
        with psycopg.connect(ROUND_DB_URL, autocommit=True) as conn:
            limit = time.monotonic() + 180
            while time.monotonic() < limit:
                state = _progress(conn)
                stored = state["stored"] >= accepted_batches
                if wear_on and wear_lag is None and stored and not state["wear"]:
                    wear_lag = time.monotonic() - posted
                if stored and not state["rules"] and not state["rollups"] and (wear_lag is not None or not wear_on):
                    break
                time.sleep(0.5)
            else:
                raise SystemExit(f"the pipeline did not drain within 180 s: {state}")
            cpu = {kind: seconds - cpu_before.get(kind, 0.0) for kind, seconds in _tree_cpu(portal.pid).items()}
            cpu["database"] = _backends_cpu(conn)
        check()
    finally:
        portal.send_signal(signal.SIGTERM)
        try:
            portal.wait(timeout=30)
        except subprocess.TimeoutExpired:
            portal.kill()
    errors: dict = {}
    for client in clients:
        for key, count in client.errors.items():
            errors[key] = errors.get(key, 0) + count
    accepted = sum(client.accepted for client in clients)
    return {"rate": accepted / (posted - started), "readings": accepted, "errors": errors, "wear_lag": wear_lag,
            "cpu_ms_per_1k": sum(cpu.values()) * 1e6 / accepted,
            "cpu_by_kind": {kind: seconds * 1e6 / accepted for kind, seconds in cpu.items()}}  # fmt: skip


def bench_ingest_overhead(results):
    """Ingest throughput with the meters on and off, ROUNDS rounds of each, alternating, in one run."""
    _admin(f"DROP DATABASE IF EXISTS {ROUND_DB} WITH (FORCE)", f"DROP DATABASE IF EXISTS {INGEST_DB} WITH (FORCE)",
           f"CREATE DATABASE {INGEST_DB}")  # fmt: skip
    os.environ.update(DATABASE_URL=INGEST_DB_URL, DJANGO_SETTINGS_MODULE="portal.settings", LOG_LEVEL="WARNING")
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(16))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from portal.telemetry.services import host_token_issue

    call_command("migrate", verbosity=0)
    hostnames = [f"wear-{n:02d}" for n in range(HOSTS)]
    tokens = {h: host_token_issue(hostname=h, label="bench", create_host=True).token for h in hostnames}
    connections.close_all()  # the template database must have no connections
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=BATCHES_PER_HOST + 1800)
    print(f"ingest: preparing {BATCHES_PER_HOST * HOSTS:,} batches of {GPUS_PER_HOST * READINGS_PER_GPU} readings "
          f"({HOSTS} hosts, {HOSTS * GPUS_PER_HOST} GPUs at 10 Hz)…", flush=True)  # fmt: skip
    bodies = {h: _bodies(h, BATCHES_PER_HOST, start) for h in hostnames}
    work: list[list[tuple[str, bytes]]] = [[] for _ in range(CLIENTS)]
    for number in range(BATCHES_PER_HOST):
        for index, hostname in enumerate(hostnames):
            work[index % CLIENTS].append((tokens[hostname], bodies[hostname][number]))
    load_before = os.getloadavg()
    rounds = {False: [], True: []}
    for round_ in range(ROUNDS * 2):
        wear_on = bool(round_ % 2)
        result = ingest_round(wear_on, work)
        rounds[wear_on].append(result)
        lag = f", meters caught up {result['wear_lag']:.1f} s after the last post" if result["wear_lag"] else ""
        if wear_on and result["wear_lag"] is None:
            lag = ", meters NOT caught up within 120 s"
        print(f"  round {round_ + 1}, meters {'on ' if wear_on else 'off'}: {result['rate']:8,.0f} readings/s "
              f"({result['readings']:,} readings, errors: {result['errors'] or 'none'}{lag}); "
              f"CPU {result['cpu_ms_per_1k']:.0f} ms per 1,000 readings ("
              f"{', '.join(f'{k} {v:.0f}' for k, v in sorted(result['cpu_by_kind'].items()))}); "
              f"load {os.getloadavg()[0]:.1f}",
              flush=True)  # fmt: skip
    _admin(f"DROP DATABASE IF EXISTS {ROUND_DB} WITH (FORCE)")
    without = statistics.median(r["rate"] for r in rounds[False])
    with_ = statistics.median(r["rate"] for r in rounds[True])
    lags = [r["wear_lag"] for r in rounds[True]]
    paired = [on["rate"] / off["rate"] for off, on in zip(rounds[False], rounds[True], strict=True)]
    cpu_off = statistics.median(r["cpu_ms_per_1k"] for r in rounds[False])
    cpu_on = statistics.median(r["cpu_ms_per_1k"] for r in rounds[True])
    results["ingest_overhead_pct"] = (1 - with_ / without) * 100
    results["ingest_cpu_overhead_pct"] = (cpu_on / cpu_off - 1) * 100
    results["wear_caught_up"] = all(lag is not None and lag < 60 for lag in lags)
    load = os.getloadavg()
    print(f"ingest, whole pipeline (PostgreSQL + Redis, serve --workers 2 + worker + beat), {ROUNDS} rounds each "
          f"side, alternating, {ROUND_S:.0f} s each; load average {load_before[0]:.1f} before, {load[0]:.1f} / "
          f"{load[1]:.1f} / {load[2]:.1f} after")  # fmt: skip
    print(f"  throughput: median {without:,.0f} readings/s with the meters off, {with_:,.0f} on (ratio "
          f"{with_ / without:.3f}; paired rounds {', '.join(f'{x:.3f}' for x in paired)}): "
          f"meters cost {results['ingest_overhead_pct']:.1f} %   (target < 10 %)")  # fmt: skip
    print(
        f"  CPU (web server, worker, beat and their database backends, until evaluated, rolled up and counted): "
        f"median {cpu_off:.0f} ms per 1,000 readings off, {cpu_on:.0f} on: meters cost "
        f"{results['ingest_cpu_overhead_pct']:.1f} % more CPU per reading (less sensitive to the machine's load)"
    )
    print(f"  meters caught up after the last post: {', '.join(f'{x:.1f} s' if x else 'no' for x in lags)} "
          "(contract: readings stored more than a minute ago count)")  # fmt: skip


def main():
    parts = sys.argv[1:] or ["wear", "metrics", "ingest"]
    results = {}
    if parts == ["ingest"]:
        bench_ingest_overhead(results)
        if os.environ.get("BENCH_WEAR_RESULT"):
            Path(os.environ["BENCH_WEAR_RESULT"]).write_text(json.dumps(results))
        return 0
    setup()
    if "wear" in parts:
        bench_wear_query(results)
    if "size" in parts:
        bench_wear_size(results)
    if "metrics" in parts:
        bench_metrics(results)
    if "ingest" in parts:
        # Django is set up once per process: the ingest part (its own databases) in its own.
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            env = {**os.environ, "BENCH_WEAR_RESULT": out.name}
            subprocess.run([sys.executable, __file__, "ingest"], env=env, check=True)
            results.update(json.loads(Path(out.name).read_text()))
    if len(parts) < 3:
        return 0
    ok = (
        results["wear_year_ms"][0] < 100
        and results["wear_year_arbitrary_ms"][0] < 100
        and results["metrics_ms"][0] < 500
        and results["ingest_overhead_pct"] < 10
        and results["wear_caught_up"]
    )
    print("verdict:", "all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
