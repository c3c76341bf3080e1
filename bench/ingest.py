"""Ingest benchmark: the portal served as in production vs raw psycopg COPY, on one PostgreSQL.

Run with `make bench-ingest`. Needs the local PostgreSQL (and Redis, for the production hooks).
It creates a scratch database, serves the portal with Daphne (DEBUG off), and for BENCH_SECONDS
(default 30) lets BENCH_CLIENTS (default 8) clients post 100-reading gzip batches as fast as
the portal answers. In the same run it stores the same rows with raw COPY, compares the
portal's write methods (one statement, COPY, bulk INSERT) on the same batches, and times the
readings endpoint over a 30-day span served from rollups. Everything stays on 127.0.0.1.

Targets (2-core machine): >= 20,000 readings/s, ratio to COPY >= 0.25, p99 < 250 ms, and the
30-day readings query < 300 ms.
"""

import datetime as dt
import gzip
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

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import host_bodies, ingest_post, machine_load, portal_served, reading  # noqa: E402

PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DB_NAME = "bench_ingest"
DB_URL = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + DB_NAME
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
SECONDS = float(os.environ.get("BENCH_SECONDS", "30"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "8"))
WORKERS = int(os.environ.get("BENCH_WORKERS", str(os.cpu_count() or 1)))
GPUS_PER_HOST = 10
READINGS_PER_GPU = 10  # 10 GPUs x 10 readings = 100 readings per batch
BODIES_PER_CLIENT = int(os.environ.get("BENCH_BODIES", "2400"))

SERVER_ENV = {
    **os.environ,
    "DATABASE_URL": DB_URL,
    "DATABASE_CONN_MAX_AGE": "600",
    "REDIS_URL": REDIS_URL,
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "PLAIN_HTTP": "true",
    "LOG_LEVEL": "WARNING",
    "DJANGO_SETTINGS_MODULE": "bench.settings",  # ingest's rate limit lifted
}


def _reset_database() -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")


def _setup_django():
    os.environ.update(SERVER_ENV)
    import django

    django.setup()


def _bodies(hostname: str, count: int, start: dt.datetime) -> list[bytes]:
    """count batches of one host: 10 GPUs at 1 Hz, ten seconds per batch."""
    every = dt.timedelta(seconds=1)
    return host_bodies(hostname, count, start, every=every, gpus=GPUS_PER_HOST, per_gpu=READINGS_PER_GPU)


class Client(threading.Thread):
    def __init__(self, port: int, token: str, bodies: list[bytes], stop_at: float):
        super().__init__(daemon=True)
        self.port, self.token, self.bodies, self.stop_at = port, token, bodies, stop_at
        self.latencies: list[float] = []
        self.accepted = 0
        self.errors: dict[int | str, int] = {}
        self.exhausted = False

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        for body in self.bodies:
            if time.monotonic() >= self.stop_at:
                return
            started = time.perf_counter()
            status, payload = ingest_post(conn, self.token, body)
            if isinstance(status, int):
                self.latencies.append(time.perf_counter() - started)
            if status == 202:
                self.accepted += json.loads(payload)["accepted"]
            else:
                self.errors[status] = self.errors.get(status, 0) + 1
        self.exhausted = True


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def _copy_baseline(rows: list[tuple], columns: tuple[str, ...], rows_per_transaction: int) -> float:
    """Readings per second that raw COPY stores, committing every rows_per_transaction rows."""
    with psycopg.connect(DB_URL) as conn:
        started = time.perf_counter()
        for offset in range(0, len(rows), rows_per_transaction):
            statement = f"COPY telemetry_reading ({', '.join(columns)}) FROM STDIN"
            with conn.cursor() as cursor, cursor.copy(statement) as copy:
                for row in rows[offset : offset + rows_per_transaction]:
                    copy.write_row(row)
            conn.commit()
        return len(rows) / (time.perf_counter() - started)


def _readings_query_times(port: int, api_token: str, gpu_uuid: str, repeat: int = 20) -> tuple[list[float], dict]:
    now = dt.datetime.now(dt.UTC)
    query = f"from={(now - dt.timedelta(days=30)).isoformat()}&to={now.isoformat()}".replace("+", "%2B")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    times, last = [], {}
    for _ in range(repeat):
        started = time.perf_counter()
        conn.request(
            "GET", f"/api/v1/gpus/{gpu_uuid}/readings?{query}", headers={"Authorization": f"Token {api_token}"}
        )
        response = conn.getresponse()
        body = response.read()
        times.append(time.perf_counter() - started)
        if response.status != 200:
            raise SystemExit(f"readings endpoint answered {response.status}: {body[:300]!r}")
        last = json.loads(body)
    return times, last


def _seed_history(gpu_id: int) -> None:
    """30 days of 1-minute and 1-hour rollups and 14 days of raw readings for one GPU."""
    from portal.telemetry.models import ROLLUP_METRICS

    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    stats = [f"{m}_{s}" for m in ROLLUP_METRICS for s in ("min", "max", "mean")]
    base_columns = ("gpu_id", "bucket", "count", "thermal_throttle_count", "xid_count", "energy_mj_max", *stats)
    with psycopg.connect(DB_URL) as conn, conn.cursor() as cursor:
        for table, step, buckets in (("telemetry_rollup1m", 60, 30 * 1440), ("telemetry_rollup1h", 3600, 30 * 24)):
            with cursor.copy(f"COPY {table} ({', '.join(base_columns)}) FROM STDIN") as copy:
                for n in range(buckets):
                    bucket = now - dt.timedelta(seconds=step * (buckets - n))
                    copy.write_row((gpu_id, bucket, 6, 0, 0, 1e6 + n, *[50.0 + (n % 30)] * len(stats)))
        with cursor.copy("COPY telemetry_reading (gpu_id, ts, temperature_c, power_w, xid_count) FROM STDIN") as copy:
            for n in range(14 * 8640):
                copy.write_row((gpu_id, now - dt.timedelta(seconds=10 * n), 55 + n % 20, 300.0, 0))
        conn.commit()


STORE_METHODS = {  # name: telemetry.services.ingest.pg_write_method
    "one statement": "one statement",
    "COPY in a transaction": "copy",
    "bulk INSERT in a transaction": "bulk insert",
}


def _store_methods(hostname: str, batches_per_method: int = 300) -> dict[str, float]:
    """Readings/s that the portal's own storage function reaches with each write method, in this
    process on one connection, with the same kind of batch and no HTTP: what the choice rests on."""
    from django.db import connection

    from portal.fleet.models import Host
    from portal.telemetry.schemas import BatchIn
    from portal.telemetry.services import ingest
    from portal.telemetry.services.ingest import reading_batch_ingest

    host = Host.objects.get(hostname=hostname)
    rates = {}
    for number, (name, method) in enumerate(STORE_METHODS.items()):
        ingest.pg_write_method = method
        start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=12 - number * 3)
        bodies = _bodies(hostname, batches_per_method + 1, start)[1:]  # without the inventory batch
        batches = [BatchIn.model_validate_json(gzip.decompress(body)) for body in bodies]
        reading_batch_ingest(host=host, batch=batches[0])  # warm: caches, prepared statement
        started = time.perf_counter()
        for batch in batches[1:]:
            reading_batch_ingest(host=host, batch=batch)
        rates[name] = (len(batches) - 1) * len(batches[0].readings) / (time.perf_counter() - started)
    connection.close()
    return rates


def main() -> None:
    _reset_database()
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=SERVER_ENV, check=True)
    _setup_django()
    from django.contrib.auth import get_user_model

    from portal.accounts.services import api_token_issue, user_set_role
    from portal.telemetry.models import READING_ROW_COLUMNS
    from portal.telemetry.services import host_token_issue

    tokens = [
        host_token_issue(hostname=f"bench-{n:02d}", label="bench", create_host=True).token for n in range(CLIENTS)
    ]
    user = get_user_model().objects.create_user("bench-viewer", password=secrets.token_urlsafe(16))
    user_set_role(user=user, role="viewer")
    api_token, _ = api_token_issue(user=user, label="bench")

    print(f"preparing {CLIENTS} x {BODIES_PER_CLIENT} gzip batches of {GPUS_PER_HOST * READINGS_PER_GPU} readings…")
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=23)
    bodies = [_bodies(f"bench-{n:02d}", BODIES_PER_CLIENT, start) for n in range(CLIENTS)]

    log = Path(tempfile.mkdtemp(prefix="bench-ingest-")) / "portal.log"
    load_before = machine_load()
    with portal_served(SERVER_ENV, log=log, workers=WORKERS) as port:
        # Warm-up: each client's first batch registers its host's GPUs.
        for token, client_bodies in zip(tokens, bodies, strict=True):
            warm = Client(port, token, client_bodies[:1], time.monotonic() + 30)
            warm.run()
            if warm.errors:
                raise SystemExit(f"warm-up failed: {warm.errors}")
        stop_at = time.monotonic() + SECONDS
        clients = [Client(port, t, b[1:], stop_at) for t, b in zip(tokens, bodies, strict=True)]
        cpu_before = os.times()
        started = time.perf_counter()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        elapsed = time.perf_counter() - started
        cpu_after = os.times()
        latencies = [value for client in clients for value in client.latencies]
        accepted = sum(client.accepted for client in clients)
        errors: dict = {}
        for client in clients:
            for key, count in client.errors.items():
                errors[key] = errors.get(key, 0) + count
        portal_rate = accepted / elapsed

        # The same rows again, straight into the same table with COPY.
        from portal.fleet.models import Gpu

        gpu_ids = list(Gpu.objects.order_by("id").values_list("id", flat=True)[:GPUS_PER_HOST])
        now = dt.datetime.now(dt.UTC)
        sample = reading("x", now, 0)
        metrics = list(READING_ROW_COLUMNS[2:-2])  # the metrics: neither xid_count nor job_set
        rows = []
        for n in range(min(accepted, 200_000)):
            values = {**sample, "throttle_reasons": 4}
            rows.append(
                (gpu_ids[n % len(gpu_ids)], now - dt.timedelta(seconds=n), *[values[m] for m in metrics], 0, None)
            )
        copy_rate_per_batch = _copy_baseline(rows, READING_ROW_COLUMNS, 100)
        copy_rate_bulk = _copy_baseline(rows, READING_ROW_COLUMNS, 10_000)

        store_rates = _store_methods("bench-00")
        _seed_history(gpu_ids[0])
        gpu_uuid = Gpu.objects.get(pk=gpu_ids[0]).uuid
        query_times, answer = _readings_query_times(port, api_token, gpu_uuid)

    print()
    print(f"ingest over HTTP ({WORKERS} Daphne process(es), DEBUG off): {CLIENTS} clients, {elapsed:.1f} s")
    print(f"  machine: {load_before} before, {machine_load()} after")
    print(f"  {len(latencies)} batches of 100 readings, errors: {errors or 'none'}")
    exhausted = sum(client.exhausted for client in clients)
    if exhausted:
        print(f"  note: {exhausted} client(s) ran out of prepared batches before the end (raise BENCH_BODIES)")
    print(f"  accepted readings/s        {portal_rate:10,.0f}   (target >= 20,000)")
    p50, p99 = _percentile(latencies, 0.5) * 1000, _percentile(latencies, 0.99) * 1000
    client_cpu = cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system
    print(f"  latency p50 / p99          {p50:7.1f} / {p99:.1f} ms   (target p99 < 250 ms)")
    print(f"  bench client CPU           {client_cpu:.1f} s (shares the 2 cores with the server)")
    print(f"raw psycopg COPY, same rows ({len(rows):,}), same table and indexes:")
    print(f"  100 rows per transaction   {copy_rate_per_batch:10,.0f} readings/s   ratio portal/COPY = "
          f"{portal_rate / copy_rate_per_batch:.2f}   (target >= 0.25)")  # fmt: skip
    print(f"  10,000 rows per transaction{copy_rate_bulk:10,.0f} readings/s   ratio portal/COPY = "
          f"{portal_rate / copy_rate_bulk:.2f}")  # fmt: skip
    print("storing a 100-reading batch, in process, one connection (how the write method was chosen):")
    for name, rate in store_rates.items():
        print(f"  {name:30s}{rate:10,.0f} readings/s")
    print(
        f"readings endpoint, 30-day span ({answer.get('resolution')} resolution, {len(answer.get('ts', []))} points):"
    )
    print(f"  p50 / max                  {_percentile(query_times, .5) * 1000:7.1f} / {max(query_times) * 1000:.1f} ms"
          "   (target < 300 ms)")  # fmt: skip


if __name__ == "__main__":
    main()
