"""What commands in the ingest answer (ingest-v1.md, "Commands") cost ingest, side by side.

Run with `make bench-ingest-commands`. CPU time (time.process_time, every thread of this process)
and queries per batch, not wall-clock, so that the figures mean something on a busy machine.
In-process, as bench/ingest_cpu.py: the ASGI ingest application is called directly with
100-reading gzip batches of 8-GPU hosts, the database work on the view's thread pool. Each
database backend runs in a child process: SQLite and PostgreSQL (scratch database
bench_ingest_commands; skipped with a note when PostgreSQL does not answer). Three paths, their
batches interleaved (ABC BCA CAB ...) so that a change in the machine's load falls on all alike:

- without: the answer never looks for commands (the portal before commands existed)
- no command: today's path for a host with nothing queued, every host nearly all the time
- pending: a host whose agent has not taken a requested diagnostic yet, so every answer carries
           the command (the worst case, while a diagnostic waits for the agent's next batch)

Target (issue: ingest throughput within 3 % of the figure without commands): "no command" costs
no query more than "without" and its CPU per reading is within 3 %.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ingest_cpu import GPUS, READINGS, asgi_post, batch_bodies, pg_scratch_database  # noqa: E402

BATCHES = int(os.environ.get("BENCH_BATCHES", "200"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "9"))
PG_DB = "bench_ingest_commands"
PATHS = ("without", "no command", "pending")
TARGET_RATIO = 1.03


def _child() -> dict:
    from bench.harness import django_setup

    scratch = django_setup(
        DEBUG="false", ALLOWED_HOSTS="127.0.0.1", PLAIN_HTTP="true", LOG_LEVEL="WARNING", DATABASE_CONN_MAX_AGE="600",
        BURN_IN_LEVEL="0", DJANGO_SETTINGS_MODULE="bench.settings",  # ingest's rate limit lifted
    )  # fmt: skip
    from django.db import connection
    from django.db.backends.signals import connection_created

    from portal.asgi import ingest_asgi_app
    from portal.core import engine
    from portal.diagnostics.services import diagnostic_request
    from portal.fleet.models import Host
    from portal.telemetry import ingest_view
    from portal.telemetry.services.tokens import host_token_issue

    hosts = {}
    for path in PATHS:
        hostname = f"bench-{path.replace(' ', '-')}-{uuid.uuid4().hex[:6]}"
        total = ROUNDS * BATCHES + 1
        hosts[path] = [host_token_issue(hostname=hostname, create_host=True).token,
                       batch_bodies(hostname, total, run_length=total), hostname]  # fmt: skip
    queries = dict.fromkeys(PATHS, 0)
    counting = {"path": None}

    def count(execute, sql, params, many, context):
        if counting["path"] is not None:
            queries[counting["path"]] += 1
        return execute(sql, params, many, context)

    def instrument(sender, connection, **kwargs):  # the view's pool threads open connections of their own
        connection.execute_wrappers.append(count)

    connection_created.connect(instrument)
    connection.execute_wrappers.append(count)
    looked_for = ingest_view._commands

    @contextlib.contextmanager
    def path_in_force(path):
        ingest_view._commands = (lambda host: []) if path == "without" else looked_for
        counting["path"] = path
        try:
            yield
        finally:
            ingest_view._commands, counting["path"] = looked_for, None

    async def post_all(path, bodies):
        token = hosts[path][0]
        answers = []
        started = time.process_time()
        for body in bodies:
            status, answer = await asgi_post(ingest_asgi_app, token, body)
            if status != 202:
                raise SystemExit(f"{engine.name()}: ingest answered {status} {answer[:300]!r}")
            answers.append(answer)
        return time.process_time() - started, answers

    for path in PATHS:  # each host's first batch registers its GPUs
        asyncio.run(post_all(path, hosts[path][1][:1]))
    pending_host = Host.objects.get(hostname=hosts["pending"][2])
    diagnostic = diagnostic_request(host=pending_host, level=1)
    for path in PATHS:
        queries[path] = 0
    seconds = {path: [] for path in PATHS}
    carried = 0
    for round_no in range(ROUNDS):
        for path in PATHS[round_no % 3 :] + PATHS[: round_no % 3]:  # each path first in turn
            bodies = hosts[path][1][1 + round_no * BATCHES : 1 + (round_no + 1) * BATCHES]
            with path_in_force(path):
                spent, answers = asyncio.run(post_all(path, bodies))
            seconds[path].append(spent)
            if path == "pending":
                carried += sum(str(diagnostic.pk) in json.loads(a).get("commands", [{}])[0].get("id", "")
                               for a in answers)  # fmt: skip
            elif any(b'"commands"' in a for a in answers):
                raise SystemExit(f"{path}: an answer carried a command")
    if carried != ROUNDS * BATCHES:
        raise SystemExit(f"pending: {carried} of {ROUNDS * BATCHES} answers carried the command")
    per_reading = {path: statistics.median(s) / (BATCHES * READINGS) * 1e6 for path, s in seconds.items()}
    return {
        "backend": engine.name(), "_scratch": str(scratch), "cpu_us": per_reading,
        "queries": {path: queries[path] / (ROUNDS * BATCHES) for path in PATHS},
    }  # fmt: skip


def _report(results: dict) -> None:
    cpu, queries = results["cpu_us"], results["queries"]
    base = cpu["without"]
    print(f"\n{results['backend']}: {ROUNDS} rounds x {BATCHES} batches of {READINGS} readings ({GPUS} GPUs) per path")
    print(f"  {'path':12s} {'CPU µs/reading':>15s} {'vs without':>11s} {'queries/batch':>14s}")
    for path in PATHS:
        print(f"  {path:12s} {cpu[path]:15.2f} {cpu[path] / base:10.3f}x {queries[path]:14.2f}")
    ratio = cpu["no command"] / base
    extra = queries["no command"] - queries["without"]
    verdict = "met" if ratio <= TARGET_RATIO and abs(extra) < 0.005 else "NOT met"
    print(f"  target (no command within {TARGET_RATIO - 1:.0%} of without, no query more): {verdict} "
          f"({ratio:.3f}x, {extra:+.2f} queries)")  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["child"]:
        print("RESULT " + json.dumps(_child()))
        return
    from bench.harness import machine_load

    print(f"bench-ingest-commands: {machine_load()}")
    backends = [arg for arg in sys.argv[1:] if arg in ("sqlite", "postgresql")] or ["sqlite", "postgresql"]
    for backend in backends:
        env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "VAR_DIR")}
        if backend == "postgresql":
            url = pg_scratch_database(PG_DB)
            if url is None:
                continue
            env["DATABASE_URL"] = url
        child = subprocess.run([sys.executable, __file__, "child"], env=env, capture_output=True, text=True,
                               check=False)  # fmt: skip
        if child.returncode != 0:
            print(child.stdout[-20000:], child.stderr[-5000:])
            raise SystemExit(f"{backend}: the bench failed")
        line = next(line for line in child.stdout.splitlines() if line.startswith("RESULT "))
        _report(json.loads(line.removeprefix("RESULT ")))


if __name__ == "__main__":
    main()
