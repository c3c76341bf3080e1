"""Pipeline benchmark: readings ingested *and* evaluated *and* rolled up, per second, with the
worker and beat running beside the web server on the same 2 cores.

Run with `make bench-pipeline` (both set-ups) or `python bench/pipeline.py embedded|production`.

- embedded: the default a small lab runs (`manage.py run`): SQLite in WAL mode, the Celery
  broker in files under VAR_DIR, one Daphne, a worker and beat. Target >= 2,000 readings/s
  (200 GPUs at 10 Hz) with ingest p99 < 250 ms meanwhile.
- production: PostgreSQL (scratch database bench_pipeline), Redis (db 13), `manage.py run
  --workers 2`: `serve --workers 2`, a worker (2 processes) and beat. Target 20,000 readings/s.

BENCH_CLIENTS (default 8) clients post 100-reading gzip batches (10 GPUs x 10 readings, a
host's second at 10 Hz) as fast as the portal answers, BENCH_BATCHES batches in all (or BENCH_RATE
batches/s in all, each post at its appointed time, each client at its own phase of the period as
agents' clocks fall, or BENCH_ALIGNED=1 all at once; `make bench-pipeline` runs the embedded
default both ways, paced at the target's 20 batches/s). The figure
is the readings posted divided by the time from the first post until the last batch is evaluated
(rules run, tickets written) and rolled up. Beat runs its schedule at BEAT_SCALE=0.1 (rollups
every 3 s instead of 30 s) so the wait for the next rollup run does not dominate the tail.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import host_bodies, ingest_post, machine_load, portal_served  # noqa: E402

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
PG_DB = "bench_pipeline"
REDIS_URL = os.environ.get("BENCH_PIPELINE_REDIS_URL", "redis://127.0.0.1:6379/13")
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "8"))
GPUS_PER_HOST = 10
READINGS_PER_GPU = 10
HOSTS = 20
TARGETS = {"embedded": 2_000, "production": 20_000}
DEFAULT_BATCHES = {"embedded": 1_200, "production": 3_000}


def _env(setup: str, var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    env.update(
        VAR_DIR=str(var_dir),
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SECURE_SSL_REDIRECT="false",
        INGEST_ALLOW_HTTP="true",
        SECURE_COOKIES="false",
        SECURE_HSTS_SECONDS="0",
        INGEST_RATE_PER_S="1000000",
        INGEST_RATE_BURST="1000000",
        LOG_LEVEL="WARNING",
        BEAT_SCALE="0.1",
        DJANGO_SETTINGS_MODULE="portal.settings",
    )
    if setup == "production":
        env.update(DATABASE_URL=PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + PG_DB, DATABASE_CONN_MAX_AGE="600")
        env.update(REDIS_URL=REDIS_URL)
    return env


def _reset(setup: str) -> None:
    if setup == "production":
        import psycopg
        import redis

        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {PG_DB}")
        redis.Redis.from_url(REDIS_URL).flushdb()


class Client(threading.Thread):
    """Posts its hosts' batches in order (each host's batches arrive in time order)."""

    def __init__(self, port: int, work: list[tuple[str, bytes]], per_s: float = 0.0, phase: float = 0.0):
        super().__init__(daemon=True)
        self.port, self.work, self.per_s, self.phase = port, work, per_s, phase
        self.latencies: list[float] = []
        self.accepted = self.batches_accepted = 0
        self.errors: dict[int | str, int] = {}
        self.first_post = self.last_answer = 0.0

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.first_post = time.monotonic()
        for number, (token, body) in enumerate(self.work):
            started = time.perf_counter()
            if self.per_s:
                # Paced: each post at its appointed time, its latency counted from then (a late
                # answer delays the next post, and that wait counts too).
                due = self.first_post + (number + self.phase) / self.per_s
                time.sleep(max(0.0, due - time.monotonic()))
                started = time.perf_counter() - max(0.0, time.monotonic() - due)
            status, payload = ingest_post(conn, token, body)
            if isinstance(status, int):
                self.latencies.append(time.perf_counter() - started)
            if status == 202:
                self.accepted += json.loads(payload)["accepted"]
                self.batches_accepted += 1
            else:
                self.errors[status] = self.errors.get(status, 0) + 1
        self.last_answer = time.monotonic()


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def _progress() -> tuple[int, int, int]:
    """(batches stored, evaluated, rolled up), read through Django on the benchmark's database."""
    from portal.maintenance.models import BatchEvaluation
    from portal.telemetry.models import IngestBatch

    stored = IngestBatch.objects.count()
    rolled = IngestBatch.objects.filter(rolled_up=True).count()
    return stored, BatchEvaluation.objects.count(), rolled


def measure(setup: str, batches: int, rate: float = 0.0) -> dict:
    var_dir = Path(tempfile.mkdtemp(prefix=f"bench-pipeline-{setup}-"))
    env = _env(setup, var_dir)
    _reset(setup)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()
    from django.db import connection

    from portal.telemetry.services import host_token_issue

    hostnames = [f"pipe-{n:02d}" for n in range(HOSTS)]
    tokens = {h: host_token_issue(hostname=h, label="bench", create_host=True).token for h in hostnames}
    per_host = batches // HOSTS
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=per_host + 120)
    print(f"[{setup}] preparing {per_host * HOSTS} batches of {GPUS_PER_HOST * READINGS_PER_GPU} readings…")
    every = dt.timedelta(seconds=1 / READINGS_PER_GPU)  # 10 Hz: a batch is a host's second
    bodies = {
        h: host_bodies(h, per_host, start, every=every, gpus=GPUS_PER_HOST, per_gpu=READINGS_PER_GPU) for h in hostnames
    }
    work: list[list[tuple[str, bytes]]] = [[] for _ in range(CLIENTS)]
    for number, hostname in enumerate(hostnames):
        work[number % CLIENTS].extend((tokens[hostname], body) for body in bodies[hostname])

    log = var_dir / "portal.log"
    load_before = machine_load()
    workers = 2 if setup == "production" else 1
    with portal_served(env, log=log, workers=workers, timeout_s=120, whole=True) as port:
        time.sleep(2)  # worker and beat ready
        # Paced, each client at its share of the rate (clients hold 2 or 3 hosts): all end together.
        # Agents keep their own clocks: each client's posts fall at its own phase of its period,
        # spread evenly, not all at the same instant (BENCH_ALIGNED=1: all at once, the worst case).
        posts = sum(len(items) for items in work)
        spread = 0 if os.environ.get("BENCH_ALIGNED") == "1" else 1
        clients = [
            Client(port, items, per_s=rate * len(items) / posts, phase=spread * number / CLIENTS)
            for number, items in enumerate(work)
            if items
        ]
        started = time.monotonic()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        posted = max(client.last_answer for client in clients)
        total = sum(client.batches_accepted for client in clients)
        evaluated_at = rolled_at = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            stored, evaluated, rolled = _progress()
            now = time.monotonic()
            if evaluated_at is None and evaluated >= stored >= total:
                evaluated_at = now
            if rolled_at is None and rolled >= stored >= total:
                rolled_at = now
            if evaluated_at and rolled_at:
                break
            connection.close()
            time.sleep(0.2)
        else:
            raise SystemExit(f"[{setup}] the pipeline did not finish within 5 minutes: {_progress()} of {total}")
    connection.close()
    accepted = sum(client.accepted for client in clients)
    errors: dict = {}
    for client in clients:
        for key, count in client.errors.items():
            errors[key] = errors.get(key, 0) + count
    latencies = [value for client in clients for value in client.latencies]
    done = max(evaluated_at, rolled_at)
    locked = log.read_text().count("database is locked")
    return {
        "setup": setup, "accepted": accepted, "errors": errors, "locked": locked,
        "ingest_rate": accepted / (posted - started), "pipeline_rate": accepted / (done - started),
        "p50": _percentile(latencies, 0.5) * 1000, "p99": _percentile(latencies, 0.99) * 1000,
        "evaluated_after": evaluated_at - posted, "rolled_after": rolled_at - posted, "seconds": done - started,
        "load_before": load_before, "load_after": machine_load(), "rate": rate,
    }  # fmt: skip


def report(result: dict) -> None:
    setup = result["setup"]
    what = {
        "embedded": "embedded default: SQLite (WAL), broker in files, 1 Daphne + worker (1) + beat",
        "production": "production: PostgreSQL + Redis, serve --workers 2 + worker (2) + beat",
    }[setup]
    pace = f"posting {result['rate']:g} batches/s" if result["rate"] else "posting as fast as it answers"
    if result["rate"]:
        pace += ", all clients at once" if os.environ.get("BENCH_ALIGNED") == "1" else ", each at its own phase"
    print(f"\n{what}, {CLIENTS} clients {pace}, 2 cores shared with the clients")
    print(f"  machine: {result['load_before']} before, {result['load_after']} after")
    print(f"  {result['accepted']:,} readings in {result['seconds']:.1f} s; errors: {result['errors'] or 'none'}; "
          f"'database is locked': {result['locked']}")  # fmt: skip
    # Paced, the figure is the posting rate less the last batch's wait: the flat-out run's is the capacity.
    posted = result["rate"] * GPUS_PER_HOST * READINGS_PER_GPU
    target = f"posted at {posted:,.0f}/s" if posted else f"target >= {TARGETS[setup]:,}"
    print(f"  pipeline readings/s (ingested, evaluated, rolled up) {result['pipeline_rate']:10,.0f}   ({target})")
    print(f"  ingest readings/s while posting                      {result['ingest_rate']:10,.0f}")
    print(f"  ingest latency p50 / p99                  {result['p50']:7.1f} / {result['p99']:.1f} ms"
          "   (target p99 < 250 ms)")  # fmt: skip
    print(f"  after the last post: evaluated +{result['evaluated_after']:.1f} s, "
          f"rolled up +{result['rolled_after']:.1f} s")  # fmt: skip


def main() -> None:
    if len(sys.argv) == 1:
        # Django is set up once per process: each run in its own interpreter. The embedded default
        # twice: as fast as it answers (the throughput), and at the target's 200 GPUs at 10 Hz
        # (20 batches/s: the ingest latency a lab at that size sees).
        for setup, rate in (("embedded", ""), ("embedded", str(TARGETS["embedded"] / 100)), ("production", "")):
            subprocess.run([sys.executable, __file__, setup], check=True, env={**os.environ, "BENCH_RATE": rate})
        return
    setup = sys.argv[1]
    if setup not in TARGETS:
        raise SystemExit(f"unknown set-up {setup!r}: embedded or production")
    rate = float(os.environ.get("BENCH_RATE") or 0)
    batches = int(os.environ.get("BENCH_BATCHES") or (DEFAULT_BATCHES[setup] // 2 if rate else DEFAULT_BATCHES[setup]))
    report(measure(setup, batches, rate))


if __name__ == "__main__":
    main()
