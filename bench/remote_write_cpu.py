"""CPU of the web side of a remote write, in process, beside the agents' ingest of the same readings.

Run with `make bench-remote-write-cpu` or `python bench/remote_write_cpu.py [--profile]`. SQLite (a
throwaway file), no server: each request is handed to the code the view runs (remote write:
snappy, the WriteRequest's decoding, remote_write_store; the agents: gunzip, batch_parse,
reading_batch_ingest), requests of bench/remote_write.py's shape (20 hosts, each request 10 GPUs
× 10 timestamps × 15 dcgm-exporter series = 1,500 samples, 100 readings; the agents' 100-reading
gzip batches). CPU time (time.process_time), not wall-clock, so that the figures mean something on
a busy machine: µs per value (the agents' reading × 15) and per sample, and their ratio. With
`--asgi`, each request is posted to its endpoint's ASGI application as the server calls it (the
view, its token check, its thread hop and answer included). The first
round of each is uncounted (hosts and GPUs created, the GPUs' first readings handed on by a
pass). `--profile` prints a cProfile of the remote write's rounds instead (the 40 functions with
the most cumulative time; BENCH_SORT=tottime: the most own time), `--pyinstrument` pyinstrument's
(installed apart: it is not among the portal's requirements).
"""

from __future__ import annotations

import cProfile
import datetime as dt
import gzip
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import django_setup, host_bodies, machine_load  # noqa: E402

HOSTS, GPUS, STEPS = 20, 10, 10
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "10"))  # requests per host, the first uncounted


def main() -> None:
    profile = "--profile" in sys.argv
    keep = django_setup(  # noqa: F841 (the database's folder)
        DJANGO_SETTINGS_MODULE="bench.settings", PLAIN_HTTP="true", ALLOWED_HOSTS="127.0.0.1",
        REMOTE_WRITE_RATE_PER_S="1000000", REMOTE_WRITE_RATE_BURST="1000000",
    )  # fmt: skip
    from django.db import transaction

    from bench.remote_write import SERIES, remote_bodies
    from portal.remote_write.services.hand_on import remote_readings_hand_on
    from portal.remote_write.services.sources import ingest_source_issue
    from portal.remote_write.services.writes import remote_write_store
    from portal.remote_write.wire import snappy_decompress, write_request_decode
    from portal.telemetry.ingest_fast import batch_parse
    from portal.telemetry.services import host_token_issue
    from portal.telemetry.services.ingest import reading_batch_ingest

    issued = ingest_source_issue(name="bench", hosts="rw-*")
    source, source_token = issued.record, issued.token
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    start_ms = int(start.timestamp() * 1000)
    remote = {f"rw-{n:02d}": remote_bodies(f"rw-{n:02d}", start_ms, ROUNDS) for n in range(HOSTS)}
    agents = {}
    for n in range(HOSTS):
        issued = host_token_issue(hostname=f"ag-{n:02d}", label="bench", create_host=True)
        bodies = host_bodies(f"ag-{n:02d}", ROUNDS, start, every=dt.timedelta(seconds=1), gpus=GPUS, per_gpu=STEPS)
        agents[issued.token] = bodies

    def remote_one(body: bytes) -> None:
        series = write_request_decode(snappy_decompress(body, limit=8 << 20))
        remote_write_store(source=source, series=series)

    def agent_one(token, body: bytes) -> None:
        batch = batch_parse(gzip.decompress(body))
        with transaction.atomic():
            reading_batch_ingest(host=token.host, batch=batch)

    from portal.telemetry.services import host_token_authenticate

    hosts = {token: host_token_authenticate(token) for token in agents}
    if "--asgi" in sys.argv:
        import asyncio

        from portal.asgi import INGEST_APPS, INGEST_PATH, REMOTE_WRITE_PATH

        loop = asyncio.new_event_loop()

        def posted(path: str, headers: list, body: bytes, status: int) -> None:
            sent = []

            async def receive():
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message):
                sent.append(message)

            scope = {
                "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                "headers": [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode()), *headers],
                "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
            }  # fmt: skip
            loop.run_until_complete(INGEST_APPS[path](scope, receive, send))
            assert sent[0]["status"] == status, sent

        def remote_one(body: bytes) -> None:  # noqa: F811
            headers = [(b"authorization", f"Bearer {source_token}".encode()), (b"content-encoding", b"snappy"),
                       (b"content-type", b"application/x-protobuf")]  # fmt: skip
            posted(REMOTE_WRITE_PATH, headers, body, 204)

        def agent_one(token, body: bytes) -> None:  # noqa: F811
            headers = [(b"authorization", f"Bearer {token.token}".encode()), (b"content-encoding", b"gzip"),
                       (b"content-type", b"application/json")]  # fmt: skip
            posted(INGEST_PATH, headers, body, 202)

        hosts = {token: type("Token", (), {"token": token}) for token in agents}

    def run(kind: str, rounds: range) -> float:
        began = time.process_time()
        for number in rounds:
            if kind == "remote":
                for bodies in remote.values():
                    remote_one(bodies[number])
            else:
                for token, bodies in agents.items():
                    agent_one(hosts[token], bodies[number])
        return time.process_time() - began

    run("remote", range(1))
    run("agent", range(1))
    # The GPUs' first readings go on by waiting (beat's pass): afterwards each write completes
    # the readings before its newest, as in bench/remote_write.py's steady state.
    remote_readings_hand_on(now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    from portal.ops.heap import freeze_startup_objects

    freeze_startup_objects()  # as the server does (portal/asgi.py)
    if "--pyinstrument" in sys.argv:  # a sampling profile (pyinstrument installed apart)
        import pyinstrument

        with pyinstrument.Profiler(interval=0.0002) as profiler:
            run("remote", range(1, ROUNDS))
        print(profiler.output_text(show_all=False, timeline=False))
        return
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run("remote", range(1, ROUNDS))
        profiler.disable()
        pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(40)
        return
    counted = ROUNDS - 1
    samples = counted * HOSTS * GPUS * STEPS * len(SERIES)
    remote_s = run("remote", range(1, ROUNDS))
    agent_s = run("agent", range(1, ROUNDS))
    per_sample, per_value = remote_s / samples * 1e6, agent_s / samples * 1e6
    print(
        f"{counted * HOSTS} requests of {GPUS * STEPS * len(SERIES)} samples / agent batches of"
        f" {GPUS * STEPS} readings:"
        f" remote write {per_sample:.2f} µs CPU per sample ({remote_s / counted / HOSTS * 1e3:.1f} ms a request),"
        f" agents {per_value:.2f} µs per value ({agent_s / counted / HOSTS * 1e3:.1f} ms a batch):"
        f" remote write costs {per_sample / per_value:.2f}× the agents' CPU per value; {machine_load()}"
    )


if __name__ == "__main__":
    main()
