"""CPU per reading of ingest and the pipeline after it, process by process and stage by stage.

Run with `make bench-ingest-cpu`. CPU time (time.process_time, every thread of this process; for
PostgreSQL its backends' user + system time from /proc), not wall-clock, so that the figures mean
something on a busy machine. In-process: the ASGI ingest application (portal.core.asgi_ingest) is
called directly, as the server would, with 100-reading gzip batches of 8-GPU hosts at 10 Hz; the
database work runs on the view's thread pool as in production.

Each database backend runs in a child process (one Django configuration each): SQLite (the
embedded recipe, a throwaway file) and PostgreSQL (the production recipe, a scratch database
bench_ingest_cpu or BENCH_PG_DB; skipped with a note when PostgreSQL does not answer). The web
side's stages, in µs of CPU per reading:

- decode+validate: gunzip, and the JSON parsed into the checked batch (both paths do it in one
            pass; "decode" below it, gunzip and parsing alone into plain values, for the comparison)
- convert:  the batch into the stored rows (and, on PostgreSQL, the one statement's JSON)
- write:    the service (reading_batch_ingest) minus convert: queries, the database driver
- answer:   the whole request through the ASGI application minus the above (token, rate limit,
            body handling, the host's commands, the JSON answer, thread hop)

"before" is the previous decoding path (pydantic's BatchIn.model_validate_json, and the row
building, JSON rows and timestamp check kept below, put in place of the service's for the run);
"after" the current one. Then, per process: the web side, PostgreSQL's backends while it ran, the
pipeline (telemetry.pipeline) in one run over every batch stored, per stage (its prepare and its
writes), its block read and its ledger, and PostgreSQL's backends meanwhile; their sum is the CPU
one reading costs end to end, and 2 cores' worth of CPU divided by it the most a 2-core machine
could ingest (the HTTP server and the agents' side come on top). `--against REV` runs the same on
the code of git revision REV (git archive into a temporary folder) and prints it beside this tree.
The bench's hosts never take their burn-in diagnostic, so every answer looks for their commands.
`--profile` prints a cProfile of the current whole path, and of the pipeline's run, instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import datetime as dt
import gzip
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from pathlib import Path

import pydantic_core

# The code measured: this tree, or (BENCH_CODE_ROOT, set by --against) another revision's.
ROOT = Path(os.environ.get("BENCH_CODE_ROOT") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(ROOT))

BATCHES = int(os.environ.get("BENCH_BATCHES", "400"))
READINGS = 100
GPUS = 8
PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
PG_DB = os.environ.get("BENCH_PG_DB", "bench_ingest_cpu")
STAGES = ("decode+validate", "convert", "write", "answer")


def batch_bodies(hostname: str, count: int, start_batch: int = 0, run_length: int = 2 * (BATCHES + 1)) -> list[bytes]:
    """count gzip batches of one host (8 GPUs, 100 readings at 10 Hz), batches start_batch to
    start_batch + count - 1 of one run of run_length in time order, the last ending a minute
    ago (recent, as an agent's batches are); only the first lists the GPUs (as the agent sends them)."""
    from tests.telemetry.batches import gpu_uuid, make_batch

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    step = dt.timedelta(seconds=0.1)
    per_batch = step * -(-READINGS // GPUS)
    uuids = [gpu_uuid(hash(hostname) % 10_000 * 100 + i) for i in range(GPUS)]
    bodies = []
    for number in range(start_batch, start_batch + count):
        batch = make_batch(
            hostname, gpus=uuids, readings=READINGS, now=now - per_batch * (run_length - number), step=step,
            inventory=number == 0,
        )  # fmt: skip
        bodies.append(gzip.compress(json.dumps(batch, separators=(",", ":")).encode(), compresslevel=1))
    return bodies


def _scope(token: str, length: int) -> dict:
    headers = [
        (b"host", b"127.0.0.1"), (b"authorization", f"Bearer {token}".encode()),
        (b"content-type", b"application/json"), (b"content-encoding", b"gzip"),
        (b"content-length", str(length).encode()),
    ]  # fmt: skip
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/api/v1/ingest", "raw_path": b"/api/v1/ingest", "query_string": b"", "root_path": "",
        "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip


async def asgi_post(app, token: str, body: bytes) -> tuple[int, bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await app(_scope(token, len(body)), receive, send)
    return sent[0]["status"], sent[1]["body"]


# The previous path's stages, as they were before the fast path.


def _reference_reading_rows(batch, gpu_ids: dict[str, int]) -> list[tuple]:
    from portal.telemetry.models import READING_METRICS, THROTTLE_BIT

    throttle_position = READING_METRICS.index("throttle_reasons")
    rows = []
    for reading in batch.readings:
        values = reading.__dict__
        metrics = [values[name] for name in READING_METRICS]
        reasons = metrics[throttle_position]
        if reasons is not None:
            metrics[throttle_position] = sum(THROTTLE_BIT[name] for name in set(reasons))
        # job_set last: the bench's batches name no jobs (the previous path had no such column)
        rows.append((gpu_ids[reading.gpu_uuid], reading.ts, *metrics, len(reading.xid_events), None))
    return rows


def _reference_rows_json(rows: list[tuple]) -> str:
    return pydantic_core.to_json(rows).decode()


def _reference_check_timestamps(batch, timestamps, now: dt.datetime) -> None:
    from django.conf import settings

    from portal.core.errors import InvalidInput
    from portal.telemetry.services.ingest import MAX_FUTURE

    max_age_h = settings.INGEST_MAX_AGE_HOURS
    oldest, newest = now - dt.timedelta(hours=max_age_h), now + MAX_FUTURE
    errors = []
    for position, reading in enumerate(batch.readings):
        if reading.ts < oldest:
            errors.append((f"readings.{position}.ts", f"more than {max_age_h} h old"))
        elif reading.ts > newest:
            errors.append((f"readings.{position}.ts", "more than 5 min in the future"))
        for event_position, event in enumerate(reading.xid_events):
            if not oldest <= event.ts <= newest:
                errors.append((f"readings.{position}.xid_events.{event_position}.ts", "outside the accepted window"))
        if len(errors) >= 20:
            break
    if errors:
        raise InvalidInput("reading timestamps outside the accepted window", problems=errors)


@contextlib.contextmanager
def _path(path: str):
    """The view and the service as they were ("before") or are ("after") for the block."""
    from portal.telemetry import ingest_view
    from portal.telemetry.services import ingest as ingest_service

    saved = ingest_service.reading_rows, ingest_service.rows_json, ingest_service._check_timestamps
    if path == "before":
        ingest_view.fast_path = False
        ingest_service.reading_rows, ingest_service.rows_json = _reference_reading_rows, _reference_rows_json
        ingest_service._check_timestamps = _reference_check_timestamps
    try:
        yield
    finally:
        ingest_view.fast_path = True
        ingest_service.reading_rows, ingest_service.rows_json, ingest_service._check_timestamps = saved


def _cpu(function, items) -> float:
    """CPU seconds of function over items."""
    started = time.process_time()
    for item in items:
        function(item)
    return time.process_time() - started


def _measure(path: str, bodies: list[bytes], whole) -> dict[str, float]:
    """CPU µs per reading of each stage of one path ("before" or "after") over bodies."""
    from portal.core import engine
    from portal.telemetry import ingest_fast
    from portal.telemetry.schemas import BatchIn
    from portal.telemetry.services import ingest as ingest_service

    whole(path, bodies[:1])  # the inventory, caches, prepared statements
    plain = [zlib.decompress(body, 31) for body in bodies[1:]]
    if path == "before":
        parse, validate = pydantic_core.from_json, BatchIn.model_validate_json
    else:
        parse, validate = ingest_fast.decode_only, ingest_fast.batch_parse
    rows_of, to_json = ingest_service.reading_rows, ingest_service.rows_json
    decode = _cpu(lambda body: parse(zlib.decompress(body, 31)), bodies[1:])
    validated = _cpu(lambda body: validate(zlib.decompress(body, 31)), bodies[1:])
    batches = [validate(body) for body in plain]
    host = ingest_service.Host.objects.get(hostname=batches[0].host.hostname)
    gpu_ids = {row["uuid"]: row["id"] for row in ingest_service.Gpu.objects.filter(host=host).values("uuid", "id")}
    one_statement = engine.writable_ctes()
    convert = _cpu(
        lambda batch: to_json(rows_of(batch, gpu_ids)) if one_statement else rows_of(batch, gpu_ids), batches
    )
    postgres = engine.server_processes()
    server = _backends_cpu() if postgres else {}
    total = whole(path, bodies[1:])
    server = _backends_spent(server) if postgres else 0.0
    # The service alone, on fresh batches of the same host (batch_id is the idempotency key).
    fresh = [zlib.decompress(body, 31) for body in batch_bodies(host.hostname, BATCHES, start_batch=BATCHES + 1)]
    fresh = [validate(body) for body in fresh]
    service = _cpu(lambda batch: ingest_service.reading_batch_ingest(host=host, batch=batch), fresh)
    seconds = {
        "decode": decode, "decode+validate": validated, "convert": convert, "write": service - convert,
        "answer": total - validated - service, "total": total, "PostgreSQL": server,
    }  # fmt: skip
    return {name: value / (READINGS * BATCHES) * 1e6 for name, value in seconds.items()}


def _backends_cpu() -> dict[int, float]:
    """CPU seconds (user + system, from /proc) of every PostgreSQL backend serving this database,
    by pid: the server's share of the work (PostgreSQL on this machine only)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        pids = [row[0] for row in cursor.fetchall()]
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _backends_spent(before: dict[int, float]) -> float:
    after = _backends_cpu()
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def _pipeline_measure() -> dict[str, float]:
    """CPU µs per reading of the pipeline's pass over everything the ingest runs stored, stage by
    stage (each stage's prepare and its writes), the block's read, the ledger; and PostgreSQL's."""
    from portal.core import engine
    from portal.telemetry import pipeline

    spent: dict[str, float] = {}

    def timed(name, function):
        def run(*args, **kwargs):
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - started

        return run

    saved_stages, saved_read = dict(pipeline._stages), pipeline.block_read
    for name, stage in saved_stages.items():

        def prepare(block, stage=stage):
            prepared = timed(stage.name, stage.prepare)(block)
            return pipeline.Prepared(apply=timed(stage.name, prepared.apply), current=prepared.current)

        pipeline._stages[name] = pipeline.Stage(stage.name, prepare, stage.order)
    pipeline.block_read = timed("read block", saved_read)
    try:
        postgres = engine.server_processes()
        server = _backends_cpu() if postgres else {}
        started = time.process_time()
        result = pipeline.pipeline_run()
        total = time.process_time() - started
        server = _backends_spent(server) if postgres else 0.0
    finally:
        pipeline._stages.clear()
        pipeline._stages.update(saved_stages)
        pipeline.block_read = saved_read
    readings = max(result.readings, 1)
    figures = {f"stage {name}": seconds for name, seconds in spent.items() if name != "read block"}
    figures["read block"] = spent.get("read block", 0.0)
    figures["ledger, passes"] = total - sum(spent.values())
    figures["worker total"] = total
    figures["PostgreSQL"] = server
    out = {name: seconds / readings * 1e6 for name, seconds in figures.items()}
    out["readings"] = result.readings
    out["failed"] = result.failed
    return out


def _child(backend: str) -> dict:
    from bench.harness import django_setup

    scratch = django_setup(
        DEBUG="false", ALLOWED_HOSTS="127.0.0.1", PLAIN_HTTP="true", LOG_LEVEL="WARNING", DATABASE_CONN_MAX_AGE="600",
        DJANGO_SETTINGS_MODULE="bench.settings",  # ingest's rate limit lifted
    )  # fmt: skip
    from portal.asgi import ingest_asgi_app
    from portal.core import engine
    from portal.telemetry import ingest_view
    from portal.telemetry.services.tokens import host_token_issue

    hosts = {}
    for path in ("before", "after", "profile"):
        hostname = f"bench-{path}-{uuid.uuid4().hex[:6]}"
        hosts[path] = (host_token_issue(hostname=hostname, create_host=True).token, batch_bodies(hostname, BATCHES + 1))

    def whole(path: str, bodies: list[bytes]) -> float:
        token = hosts[path][0]

        async def run():
            started = time.process_time()
            for body in bodies:
                status, answer = await asgi_post(ingest_asgi_app, token, body)
                if status != 202:
                    raise SystemExit(f"{backend}: ingest answered {status} {answer[:300]!r}")
            return time.process_time() - started

        return asyncio.run(run())

    results = {"backend": engine.name(), "_scratch": str(scratch)}
    if "--profile" in sys.argv:
        # cProfile sees one thread: the database work on the event loop's, not on the pool's.
        def inline(function):
            async def run(*args):
                return function(*args)

            return run

        ingest_view._run_db = inline
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        token, bodies = hosts["profile"]
        whole("profile", bodies[:1])
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        whole("profile", bodies[1:])
        profiler.disable()
        sort, lines = os.environ.get("BENCH_SORT", "cumulative"), int(os.environ.get("BENCH_LINES", "70"))
        pstats.Stats(profiler).sort_stats(sort).print_stats(lines)
        from portal.telemetry.pipeline import pipeline_run

        print("The pipeline, one run over the batches stored above:")
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        pipeline_run()
        profiler.disable()
        pstats.Stats(profiler).sort_stats(sort).print_stats(lines)
        return results
    for path in ("before", "after"):
        with _path(path):
            results[path] = _measure(path, hosts[path][1], whole)
    results["pipeline"] = _pipeline_measure()
    return results


def _figures(results: dict) -> list[tuple[str, float]]:
    """One run's figures, µs of CPU per reading, in report order: the web process's stages (the
    current path), PostgreSQL's backends meanwhile, the pipeline's stages, its database, the whole."""
    postgres = results["backend"] == "postgresql"
    after, pipeline = results["after"], results["pipeline"]
    rows = [(f"web: {stage}", after[stage]) for stage in STAGES]
    rows.append(("web: whole request", after["total"]))
    if postgres:
        rows.append(("PostgreSQL, for ingest", after["PostgreSQL"]))
    rows += [(f"worker: {name}", value) for name, value in pipeline.items()
             if name not in ("readings", "failed", "worker total", "PostgreSQL")]  # fmt: skip
    rows.append(("worker: whole pass", pipeline["worker total"]))
    if postgres:
        rows.append(("PostgreSQL, for the worker", pipeline["PostgreSQL"]))
    whole = after["total"] + pipeline["worker total"]
    if postgres:
        whole += after["PostgreSQL"] + pipeline["PostgreSQL"]
    rows.append(("end to end", whole))
    return rows


def _report(results: dict, against: dict | None = None, revision: str = "") -> None:
    print(f"\n{results['backend']}: CPU µs per reading ({BATCHES} batches of {READINGS} readings, {GPUS} GPUs)")
    print(f"  web, the previous decoding path beside the current one:\n  {'stage':16s} {'before':>8s} {'after':>8s}")
    for stage in (*STAGES, "total", "decode"):
        before, after = results["before"][stage], results["after"][stage]
        print(f"  {stage:16s} {before:8.2f} {after:8.2f}")
    before, after = results["before"]["total"], results["after"]["total"]
    print(f"  whole request: {before / after:.2f}x less CPU; {1e6 / after:,.0f} readings/s per core (was "
          f"{1e6 / before:,.0f})")  # fmt: skip
    pipeline = results["pipeline"]
    failed = f"; stages failed: {', '.join(pipeline['failed'])}" if pipeline["failed"] else ""
    print(f"  each process, the pipeline in one run over {pipeline['readings']:,} readings{failed}:")
    old = dict(_figures(against)) if against else {}
    print(f"  {'':30s} {revision[:10]:>10s} {'this tree':>10s}")
    for name, value in _figures(results):
        before = f"{old[name]:10.2f}" if name in old else " " * 10
        print(f"  {name:30s} {before} {value:10.2f}")
    whole = _figures(results)[-1][1]
    line = f"  end to end on 2 cores, from CPU per reading alone: at most {2e6 / whole:,.0f} readings/s"
    if against:
        line += f" ({revision}: {2e6 / _figures(against)[-1][1]:,.0f})"
    print(line)


def _tree(revision: str) -> Path:
    """The repository's files at `revision`, in a temporary folder (git archive: nothing of the
    repository's state changes)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-ingest-cpu-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def pg_scratch_database(name: str = PG_DB) -> str | None:
    """A new empty database `name` on the local PostgreSQL (dropped first), its URL; None (said)
    when PostgreSQL does not answer."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
    except Exception as error:  # noqa: BLE001 - any failure means "no PostgreSQL here"
        print(f"PostgreSQL skipped: {error}")
        return None
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def _run_child(backend: str, extra: list[str], code_root: Path | None = None) -> dict | None:
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "VAR_DIR")}
    env.pop("BENCH_CODE_ROOT", None)
    if code_root is not None:
        env["BENCH_CODE_ROOT"] = str(code_root)
    if backend == "postgresql":
        url = pg_scratch_database()
        if url is None:
            return None
        env["DATABASE_URL"] = url
    child = subprocess.run(
        [sys.executable, __file__, "child", backend, *extra], env=env, capture_output=True, text=True, check=False
    )
    if child.returncode != 0 or "--profile" in extra:
        print(child.stdout[-20000:], child.stderr[-5000:])
        if child.returncode != 0:
            raise SystemExit(f"{backend}: the bench failed")
        return None
    line = next(line for line in child.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        results = _child(sys.argv[2])
        if "--profile" not in sys.argv:
            print("RESULT " + json.dumps(results))
        return
    from bench.harness import machine_load

    print(f"bench-ingest-cpu: {machine_load()}")
    extra = [arg for arg in sys.argv[1:] if arg == "--profile"]
    backends = [arg for arg in sys.argv[1:] if arg in ("sqlite", "postgresql")] or ["sqlite", "postgresql"]
    revision = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else ""
    old_tree = _tree(revision) if revision and not extra else None
    try:
        for backend in backends:
            # The revision first, then this tree: a machine that grows busier favours neither always.
            against = _run_child(backend, extra, old_tree) if old_tree else None
            results = _run_child(backend, extra)
            if results is not None:
                _report(results, against, revision)
    finally:
        if old_tree is not None:
            shutil.rmtree(old_tree, ignore_errors=True)


if __name__ == "__main__":
    main()
