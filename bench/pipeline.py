"""Pipeline benchmark: readings ingested *and* evaluated *and* rolled up, per second, with the
worker and beat running beside the web server on the same 2 cores.

Run with `make bench-pipeline` (both set-ups) or `python bench/pipeline.py embedded|production`.

- embedded: the default a small lab runs (`manage.py run`): SQLite in WAL mode, the Celery
  broker in files under VAR_DIR, one Daphne, a worker and beat. Target >= 12,000 readings/s as
  fast as it answers with ingest p99 < 250 ms; paced at 200 GPUs × 10 Hz: p99 < 100 ms and every
  stage finished within 2 s of the last post.
- production: PostgreSQL (scratch database bench_pipeline), Redis (db 13), `manage.py run
  --workers 2`: `serve --workers 2`, a worker (2 processes) and beat. Target 25,000 readings/s.

BENCH_CLIENTS (default 8) clients post 100-reading gzip batches (10 GPUs x 10 readings, a
host's second at 10 Hz) as fast as the portal answers, BENCH_BATCHES batches in all (or BENCH_RATE
batches/s in all, each post at its appointed time, each client at its own phase of the period as
agents' clocks fall, or BENCH_ALIGNED=1 all at once; `make bench-pipeline` runs the embedded
default both ways, paced at the target's 20 batches/s). The figure
is the readings posted divided by the time from the first post until every stage of the pipeline
(rules, rollups, wear) has finished the last batch, as `GET /api/v1/pipeline` says (polled every
0.25 s with a personal token, as an operator's monitoring would: the bench reads no table). The
same samples give the pipeline's lag while it runs (the oldest pending batch's age, p50/p99/max).
Beside it, in the same run, the raw store: the same number of readings written by COPY into a
scratch copy of the readings table (PostgreSQL) or by one prepared INSERT (SQLite), the limit a
pipeline could approach on this machine.

A steady run for the lag: BENCH_RATE=50 BENCH_BATCHES=15000 (5,000 readings/s for 5 minutes).

BENCH_JOBS=4: every reading names 4 jobs (ingest-v1 `jobs`), which the span stage folds into
spans. `python bench/pipeline.py jobs [embedded|production]` (`make bench-pipeline-jobs`) runs the
set-up without and then with them, in one run, and prints the ratio (the target: within 5 %).
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

from bench.harness import CpuMeter, host_bodies, ingest_post, machine_load, portal_served  # noqa: E402

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
PG_DB = "bench_pipeline"
REDIS_URL = os.environ.get("BENCH_PIPELINE_REDIS_URL", "redis://127.0.0.1:6379/13")
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "8"))
GPUS_PER_HOST = 10
READINGS_PER_GPU = 10
HOSTS = 20
TARGETS = {"embedded": 12_000, "production": 25_000}
PACED_BATCHES_PER_S = 20  # 200 GPUs at 10 Hz, in 100-reading batches
DEFAULT_BATCHES = {"embedded": 1_200, "production": 3_000}
JOBS = int(os.environ.get("BENCH_JOBS") or 0)  # job keys per reading


def _env(setup: str, var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL"}}
    env.update(
        VAR_DIR=str(var_dir),
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        PLAIN_HTTP="true",
        LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="bench.settings_fast_beat",  # ingest's rate limit lifted, beat 10 times faster
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


class PipelineWatch(threading.Thread):
    """Polls GET /api/v1/pipeline: each stage's backlog and lag, and when each stage last had
    nothing waiting (once posting is over, that is when it finished)."""

    def __init__(self, port: int, token: str):
        super().__init__(daemon=True)
        self.port, self.token = port, token
        self.stop = threading.Event()
        self.lags: list[float] = []  # the largest stage lag of each sample
        self.stages: dict[str, dict] = {}
        self.idle_since: dict[str, float | None] = {}

    def sample(self) -> dict[str, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/api/v1/pipeline", headers={"Authorization": f"Token {self.token}"})
            answer = conn.getresponse()
            body = answer.read()
        finally:
            conn.close()
        if answer.status != 200:
            raise SystemExit(f"GET /api/v1/pipeline answered {answer.status}: {body[:200]!r}")
        return {stage["name"]: stage for stage in json.loads(body)["stages"]}

    def run(self):
        while not self.stop.is_set():
            stages = self.sample()
            now = time.monotonic()
            self.stages = stages
            self.lags.append(max((stage["lag_seconds"] or 0.0) for stage in stages.values()))
            for name, stage in stages.items():
                if stage["backlog_batches"]:
                    self.idle_since[name] = None
                elif self.idle_since.get(name) is None:
                    self.idle_since[name] = now
            self.stop.wait(0.25)

    def finished(self) -> dict[str, float] | None:
        """When each stage finished everything, once all have (monotonic seconds), else None."""
        if not self.idle_since or any(value is None for value in self.idle_since.values()):
            return None
        return dict(self.idle_since)


def _raw_store_rate(setup: str, readings: int) -> float:
    """Readings/s the database takes the same rows at, with nothing else: COPY into a scratch copy
    of the readings table (PostgreSQL), one prepared INSERT run by executemany (SQLite)."""
    import itertools

    from django.db import connection, transaction

    from portal.fleet.models import Gpu
    from portal.telemetry.columns import READING_ROW_COLUMNS
    from portal.telemetry.models import Reading

    gpu_ids = list(Gpu.objects.values_list("pk", flat=True)) or [1]
    base = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    values = (55, 40, 250.0, 300.0, 1234567.0, 90, 40, 40000, 1800, 9000, 0, 0, 0, 0, 0, False, False, False, 4,
              16, 0, 0, 1 if JOBS else None)  # fmt: skip
    rows = [
        (gpu_id, base + dt.timedelta(milliseconds=100 * n), *values)
        for n, gpu_id in zip(range(readings), itertools.cycle(gpu_ids), strict=False)
    ]
    table = Reading._meta.db_table
    columns = ", ".join(READING_ROW_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_raw_store")
        cursor.execute(f"CREATE TABLE bench_raw_store AS SELECT * FROM {table} WHERE false")
        if setup == "production":
            cursor.execute("CREATE INDEX ON bench_raw_store (gpu_id, ts)")
            started = time.perf_counter()
            with cursor.cursor.copy(f"COPY bench_raw_store ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            cursor.execute("CREATE INDEX bench_raw_store_gpu_ts ON bench_raw_store (gpu_id, ts)")
            adapt = connection.ops.adapt_datetimefield_value
            rows = [(row[0], adapt(row[1]), *row[2:]) for row in rows]
            placeholders = ", ".join(["%s"] * len(READING_ROW_COLUMNS))
            started = time.perf_counter()
            for first in range(0, len(rows), 100):  # as ingest: a transaction per 100-reading batch
                with transaction.atomic(), connection.cursor() as batch_cursor:
                    batch_cursor.executemany(
                        f"INSERT INTO bench_raw_store ({columns}) VALUES ({placeholders})", rows[first : first + 100]
                    )
        elapsed = time.perf_counter() - started
        cursor.execute("DROP TABLE bench_raw_store")
    return readings / elapsed


def measure(setup: str, batches: int, rate: float = 0.0) -> dict:
    var_dir = Path(tempfile.mkdtemp(prefix=f"bench-pipeline-{setup}-"))
    env = _env(setup, var_dir)
    _reset(setup)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from portal.accounts.services import api_token_issue
    from portal.telemetry.services import host_token_issue

    watcher = get_user_model().objects.create_user("bench-watch", password=secrets.token_urlsafe(16))
    api_secret, _ = api_token_issue(user=watcher, label="bench")
    hostnames = [f"pipe-{n:02d}" for n in range(HOSTS)]
    tokens = {h: host_token_issue(hostname=h, label="bench", create_host=True).token for h in hostnames}
    per_host = batches // HOSTS
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=per_host + 120)
    print(f"[{setup}] preparing {per_host * HOSTS} batches of {GPUS_PER_HOST * READINGS_PER_GPU} readings…")
    every = dt.timedelta(seconds=1 / READINGS_PER_GPU)  # 10 Hz: a batch is a host's second
    bodies = {
        h: host_bodies(h, per_host, start, every=every, gpus=GPUS_PER_HOST, per_gpu=READINGS_PER_GPU, jobs=JOBS)
        for h in hostnames
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
        watch = PipelineWatch(port, api_secret)
        watch.start()
        cpu = CpuMeter()
        cpu.start()
        started = time.monotonic()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        posted = max(client.last_answer for client in clients)
        watch.idle_since.clear()  # finished counts from here on: every batch is stored by now
        deadline = time.monotonic() + 300
        while (finished := watch.finished()) is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"[{setup}] the pipeline did not finish within 5 minutes: {watch.stages}")
            time.sleep(0.1)
        cpu.stop()
        watch.stop.set()
        watch.join()
    connection.close()
    accepted = sum(client.accepted for client in clients)
    errors: dict = {}
    for client in clients:
        for key, count in client.errors.items():
            errors[key] = errors.get(key, 0) + count
    latencies = [value for client in clients for value in client.latencies]
    finished = {name: max(moment, posted) for name, moment in finished.items()}
    done = max(finished.values())
    locked = log.read_text().count("database is locked")
    raw_rate = _raw_store_rate(setup, min(accepted, 200_000))
    return {
        "setup": setup, "accepted": accepted, "errors": errors, "locked": locked,
        "ingest_rate": accepted / (posted - started), "pipeline_rate": accepted / (done - started),
        "p50": _percentile(latencies, 0.5) * 1000, "p99": _percentile(latencies, 0.99) * 1000,
        "finished_after": {name: moment - posted for name, moment in sorted(finished.items())},
        "seconds": done - started, "raw_rate": raw_rate,
        "lag_p50": _percentile(watch.lags, 0.5), "lag_p99": _percentile(watch.lags, 0.99),
        "lag_max": max(watch.lags, default=float("nan")),
        "load_before": load_before, "load_after": machine_load(), "rate": rate, "cpu": cpu.line(),
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
    jobs = f", {JOBS} jobs on every reading" if JOBS else ""
    print(f"\n{what}, {CLIENTS} clients {pace}{jobs}, 2 cores shared with the clients")
    print(f"  machine: {result['load_before']} before, {result['load_after']} after")
    print(f"  {result['accepted']:,} readings in {result['seconds']:.1f} s; errors: {result['errors'] or 'none'}; "
          f"'database is locked': {result['locked']}")  # fmt: skip
    # Paced, the figure is the posting rate less the last batch's wait: the flat-out run's is the capacity.
    posted = result["rate"] * GPUS_PER_HOST * READINGS_PER_GPU
    target = f"posted at {posted:,.0f}/s" if posted else f"target >= {TARGETS[setup]:,}"
    raw = "COPY into a scratch readings table" if setup == "production" else "prepared INSERT, 100 per transaction"
    print(f"  pipeline readings/s (ingested, every stage finished) {result['pipeline_rate']:10,.0f}   ({target})")
    print(f"  ingest readings/s while posting                      {result['ingest_rate']:10,.0f}")
    print(f"  raw store readings/s ({raw}) {result['raw_rate']:10,.0f}   "
          f"(pipeline / raw = {result['pipeline_rate'] / result['raw_rate']:.2f})")  # fmt: skip
    print(f"  ingest latency p50 / p99                  {result['p50']:7.1f} / {result['p99']:.1f} ms"
          "   (target p99 < 250 ms)")  # fmt: skip
    stages = ", ".join(f"{name} +{after:.1f} s" for name, after in result["finished_after"].items())
    print(f"  after the last post, finished: {stages}")
    print(f"  pipeline lag while it ran (GET /api/v1/pipeline every 0.25 s): p50 {result['lag_p50']:.1f} s, "
          f"p99 {result['lag_p99']:.1f} s, max {result['lag_max']:.1f} s")  # fmt: skip
    print(f"  CPU from the first post until every stage finished: {result['cpu']}")


def main() -> None:
    if len(sys.argv) == 1:
        # Django is set up once per process: each run in its own interpreter. The embedded default
        # twice: as fast as it answers (the throughput), and at the target's 200 GPUs at 10 Hz
        # (20 batches/s: the ingest latency a lab at that size sees).
        for setup, rate in (("embedded", ""), ("embedded", str(PACED_BATCHES_PER_S)), ("production", "")):
            subprocess.run([sys.executable, __file__, setup], check=True, env={**os.environ, "BENCH_RATE": rate})
        return
    if sys.argv[1] == "jobs":
        _jobs_compare(sys.argv[2] if len(sys.argv) > 2 else "embedded")
        return
    setup = sys.argv[1]
    if setup not in TARGETS:
        raise SystemExit(f"unknown set-up {setup!r}: embedded or production")
    rate = float(os.environ.get("BENCH_RATE") or 0)
    batches = int(os.environ.get("BENCH_BATCHES") or (DEFAULT_BATCHES[setup] // 2 if rate else DEFAULT_BATCHES[setup]))
    result = measure(setup, batches, rate)
    report(result)
    if os.environ.get("BENCH_RESULT"):
        kept = {name: result[name] for name in ("pipeline_rate", "ingest_rate", "p50", "p99")}
        Path(os.environ["BENCH_RESULT"]).write_text(json.dumps(kept))


def _jobs_compare(setup: str) -> None:
    """The set-up without jobs, then with 4 on every reading, in one run; the ratio of their figures."""
    figures = {}
    for jobs in (0, 4):
        out = Path(tempfile.mkstemp(prefix="bench-pipeline-jobs-")[1])
        env = {**os.environ, "BENCH_RATE": "", "BENCH_JOBS": str(jobs), "BENCH_RESULT": str(out)}
        subprocess.run([sys.executable, __file__, setup], check=True, env=env)
        figures[jobs] = json.loads(out.read_text())
    without, with_jobs = figures[0], figures[4]
    print(f"\n[{setup}] jobs on every reading (4 keys) against none, the same run:")
    for name in ("pipeline_rate", "ingest_rate"):
        ratio = with_jobs[name] / without[name]
        print(f"  {name:14} {without[name]:10,.0f} -> {with_jobs[name]:10,.0f}  ({ratio:.3f}x)")
    print(f"  ingest p50/p99  {without['p50']:.1f}/{without['p99']:.1f} ms -> "
          f"{with_jobs['p50']:.1f}/{with_jobs['p99']:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
