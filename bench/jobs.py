"""Jobs on GPUs: what the span stage costs per reading, and the jobs API and page with 100,000
spans stored (portal-api-v1.md, "Jobs on GPUs").

1. The span stage: 20 hosts × 10 GPUs post batches (10 readings per GPU) through the ingest
   service, half of them naming 4 jobs on every reading, half naming none; then one pipeline run
   does every stage, and the pipeline's own figures (PassResult.seconds, each stage's wall time)
   give each stage's µs per reading.
2. 100,000 spans: 25,000 jobs of 5 users on 1,000 GPUs (125 hosts × 8) over 30 days, 4 spans each;
   then `GET /api/v1/jobs` (no filter, `user`, `host`, `idle=true`), `GET /api/v1/jobs/{key}` and
   the job page, each asked `--runs` times through the test client: p50 and p95 (target p95 < 100 ms).

    .venv/bin/python bench/jobs.py [--postgres] [--runs 100] [--only-reads]

PostgreSQL: the scratch database bench_jobs, or BENCH_PG_DB (kept after the run, to EXPLAIN on),
ANALYZEd once the spans are stored, as autovacuum would (--no-analyze: left without statistics).
"""

import argparse
import datetime as dt
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import django_setup, machine_load  # noqa: E402

PG_DB = os.environ.get("BENCH_PG_DB", "bench_jobs")
PG_URL = f"postgres://postgres@127.0.0.1:5432/{PG_DB}"
TARGET_MS = 100.0


def _setup(args):
    if args.postgres:
        for sql in (f"DROP DATABASE IF EXISTS {PG_DB}", f"CREATE DATABASE {PG_DB}"):
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True)
        os.environ["DATABASE_URL"] = PG_URL
        os.environ["VAR_DIR"] = tempfile.mkdtemp()
    else:
        os.environ.pop("DATABASE_URL", None)
    # DEBUG off for the CPU figures (on, Django keeps every query's text) unless pages are read too
    return django_setup(
        DEBUG="false" if args.only_e2e else "true", ALLOWED_HOSTS="testserver,127.0.0.1", PLAIN_HTTP="true",
        DJANGO_SETTINGS_MODULE="bench.settings",  # ingest's rate limit lifted
    )  # fmt: skip


def stage_cost(*, hosts: int = 20, batches: int = 25) -> dict:
    """Each stage's µs per reading over one pipeline run, from the pipeline's own figures."""
    from bench.harness import reading
    from portal.telemetry import enqueue
    from portal.telemetry.pipeline import pipeline_run
    from portal.telemetry.schemas import BatchIn
    from portal.telemetry.services.ingest import reading_batch_ingest
    from portal.telemetry.services.tokens import host_token_issue
    from tests.telemetry.batches import make_batch, make_gpu

    enqueue._send = lambda: None  # stored, nobody told: the run below does the work
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    start = now - dt.timedelta(hours=2)
    out = {}
    for jobs in (0, 4):
        for h in range(hosts):
            hostname = f"jobs{jobs}-{h:02d}"
            host = host_token_issue(hostname=hostname, label="bench", create_host=True).record.host
            gpus = [make_gpu(f"GPU-{jobs}{h:03d}{g:04d}-6b9b-4b4e-9d0a-6f1c1a2b3c4d", index=g) for g in range(10)]
            for b in range(batches):
                batch = make_batch(hostname, readings=0, now=now)
                batch["gpus"] = gpus
                batch["readings"] = [
                    reading(gpu["uuid"], start + dt.timedelta(seconds=10 * (b * 10 + k)), b * 10 + k, jobs=jobs)
                    for k in range(10)
                    for gpu in gpus
                ]
                reading_batch_ingest(host=host, batch=BatchIn.model_validate_json(json.dumps(batch, default=str)),
                                     now=now)  # fmt: skip
        result = pipeline_run()
        out[jobs] = {name: 1e6 * seconds / result.readings for name, seconds in result.seconds.items()}
        out[jobs]["readings"] = result.readings
    return out


def _gzip_bodies(jobs: int, prefix: str, hosts: int, batches: int, first_step: int, now: dt.datetime) -> list:
    """(token, gzip body) of `hosts` hosts × `batches` batches of 10 GPUs × 10 readings, each a
    host's 10 seconds continuing the last (at 1 Hz: spans are continued, as in steady ingest)."""
    from bench.harness import reading
    from portal.telemetry.services.tokens import host_token_issue
    from tests.telemetry.batches import make_batch, make_gpu

    out = []
    for h in range(hosts):
        hostname = f"{prefix}{jobs}-{h}"
        token = _tokens.get(hostname) or _tokens.setdefault(
            hostname, host_token_issue(hostname=hostname, label="b", create_host=True).token
        )
        gpus = [make_gpu(f"GPU-e{jobs}{h:03d}{g:04d}-6b9b-4b4e-9d0a-6f1c1a2b3c4d", index=g) for g in range(10)]
        for b in range(batches):
            step = first_step + b * 10
            batch = make_batch(hostname, readings=0, now=now)
            batch["gpus"] = gpus
            batch["readings"] = [
                reading(g["uuid"], now - dt.timedelta(hours=3) + dt.timedelta(seconds=step + k), step + k, jobs=jobs)
                for k in range(10) for g in gpus
            ]  # fmt: skip
            out.append((token, gzip.compress(json.dumps(batch, default=str).encode(), compresslevel=1)))
    return out


_tokens: dict[str, str] = {}


def end_to_end(*, rounds: int = 6, hosts: int = 4, batches: int = 10) -> dict[int, dict[str, float]]:
    """Ingest through the ASGI ingest application (gzip, the fast path's decoding, the job sets,
    the write, the answer) and then the whole pipeline, CPU µs per reading of this process (every
    thread), without jobs and with 4 on every reading, in alternating rounds (a loaded machine
    weighs on both alike): {jobs: {"web": µs, "worker": µs}}."""
    import asyncio

    from bench.ingest_cpu import asgi_post
    from portal.asgi import ingest_asgi_app
    from portal.telemetry import enqueue
    from portal.telemetry.pipeline import pipeline_run

    enqueue._send = lambda: None
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    spent = {jobs: {"web": 0.0, "worker": 0.0} for jobs in (0, 4)}
    counted = {0: 0, 4: 0}

    async def post(bodies):
        for token, body in bodies:
            status, answer = await asgi_post(ingest_asgi_app, token, body)
            if status != 202:
                raise SystemExit(f"ingest answered {status}: {answer[:300]!r}")

    for r in range(rounds + 1):  # the first round warms both paths and is not counted
        for jobs in (0, 4) if r % 2 == 0 else (4, 0):
            bodies = _gzip_bodies(jobs, "e2e", hosts, batches, r * batches * 10, now)
            began = time.process_time()
            asyncio.run(post(bodies))
            posted = time.process_time()
            pipeline_run()
            if r:
                spent[jobs]["web"] += posted - began
                spent[jobs]["worker"] += time.process_time() - posted
                counted[jobs] += len(bodies) * 100
    return {jobs: {side: 1e6 * cpu / counted[jobs] for side, cpu in sides.items()} for jobs, sides in spent.items()}


def seed_spans(*, hosts: int = 125, gpus: int = 8, jobs: int = 25_000, spans_per_job: int = 4, days: int = 30):
    from portal.fleet.models import Gpu, Host
    from portal.jobs.models import Job, JobSpan

    rng = random.Random(45)
    now = dt.datetime.now(dt.UTC)
    host_rows = Host.objects.bulk_create([Host(hostname=f"jh-{h:03d}") for h in range(hosts)])
    gpu_rows = Gpu.objects.bulk_create([
        Gpu(uuid=f"GPU-jobs-{h:03d}-{i}", serial=f"S{h:03d}{i}", host=host, index=i)
        for h, host in enumerate(host_rows) for i in range(gpus)
    ])  # fmt: skip
    users = ["ana", "bo", "cy", "dora", "eli"]
    job_rows, span_rows = [], []
    for n in range(jobs):
        begin = now - dt.timedelta(days=days) + dt.timedelta(seconds=rng.uniform(0, days * 86400 - 7200))
        length = dt.timedelta(minutes=rng.uniform(10, 600))
        util = rng.choice([2.0, 60.0, 95.0])
        hours = length.total_seconds() / 3600
        job_rows.append(Job(key=f"slurm:{100000 + n}", scheduler="slurm", user=rng.choice(users), lookup="done",
                            started_at=begin, ended_at=begin + length, gpu_hours=spans_per_job * hours,
                            utilization_sum=util * 100, utilization_count=100, idle=util < 5 and hours >= 1,
                            energy_mj=1e9))  # fmt: skip
    job_rows = Job.objects.bulk_create(job_rows, batch_size=5000)
    for job in job_rows:
        first = rng.randrange(0, len(gpu_rows) - spans_per_job)
        for g in range(spans_per_job):
            span_rows.append(JobSpan(job=job, gpu=gpu_rows[first + g], started_at=job.started_at, ended_at=job.ended_at,
                                     readings=100, utilization_sum=job.utilization_sum, utilization_count=100,
                                     memory_used_max_mib=40000, temperature_max_c=70, throttled_count=0,
                                     energy_mj=2.5e8, energy_last_mj=1e12))  # fmt: skip
    JobSpan.objects.bulk_create(span_rows, batch_size=5000)
    return {"spans": JobSpan.objects.count(), "jobs": len(job_rows), "hosts": [h.hostname for h in host_rows]}


def _timed(client, url: str, runs: int, params=None) -> tuple[float, float]:
    client.get(url, params)  # warm
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        answer = client.get(url, params)
        times.append((time.perf_counter() - began) * 1000)
        assert answer.status_code == 200, (url, answer.status_code)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.95 * len(times)))]


def read_times(seeded: dict, runs: int) -> list[tuple[str, float, float]]:
    from django.test import Client

    from portal.accounts.roles import ROLE_VIEWER
    from tests.factories import UserFactory

    client = Client()
    client.force_login(UserFactory(username="bench-viewer", role=ROLE_VIEWER))
    rng = random.Random(7)
    keys = [f"slurm:{100000 + rng.randrange(seeded['jobs'])}" for _ in range(5)]
    out = [
        # the machine's floor for a signed-in API request, beside them: an existing, small list
        ("(floor) GET /api/v1/tickets", *_timed(client, "/api/v1/tickets", runs, {"limit": "1"})),
        ("GET /api/v1/jobs", *_timed(client, "/api/v1/jobs", runs)),
        ("GET /api/v1/jobs?user=cy", *_timed(client, "/api/v1/jobs", runs, {"user": "cy"})),
        ("GET /api/v1/jobs?host=…", *_timed(client, "/api/v1/jobs", runs, {"host": seeded["hosts"][17]})),
        ("GET /api/v1/jobs?idle=true", *_timed(client, "/api/v1/jobs", runs, {"idle": "true"})),
        ("GET /api/v1/jobs/{key}", *_timed(client, "/api/v1/jobs/" + quote(keys[0], safe=""), runs)),
        ("job page /jobs/{key}/", *_timed(client, "/jobs/" + quote(keys[1], safe="") + "/", runs)),
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds of the end-to-end figure")
    parser.add_argument("--only-e2e", action="store_true", help="the end-to-end CPU figure alone")
    parser.add_argument("--only-reads", action="store_true", help="part 2 alone: 100,000 spans and the reads")
    parser.add_argument("--no-analyze", action="store_true", help="PostgreSQL: read the spans with no statistics")
    args = parser.parse_args()
    keep = _setup(args)  # noqa: F841 - the scratch SQLite folder lives as long as the run
    engine = "PostgreSQL" if args.postgres else "SQLite"
    if not args.only_reads:
        ingest_and_stages(args, engine)
    if not args.only_e2e:
        reads(args, engine)


def ingest_and_stages(args, engine: str) -> None:
    both = end_to_end(rounds=args.rounds)
    total = {jobs: sum(sides.values()) for jobs, sides in both.items()}
    print(f"\nIngest (ASGI, gzip) and the whole pipeline in process, CPU µs per reading ({engine}, "
          f"{args.rounds} alternating rounds, {machine_load()}):")  # fmt: skip
    for side in ("web", "worker"):
        print(f"  {side:7} no jobs {both[0][side]:6.1f}, 4 jobs on every reading {both[4][side]:6.1f}: "
              f"{both[4][side] / both[0][side]:.3f}x")  # fmt: skip
    print(f"  {'total':7} no jobs {total[0]:6.1f}, 4 jobs on every reading {total[4]:6.1f}: "
          f"{total[4] / total[0]:.3f}x (target within 5 %)")  # fmt: skip
    if args.only_e2e:
        return
    costs = stage_cost()
    print(f"\nThe pipeline's stages, µs per reading ({engine}; one run over {costs[4]['readings']:,} readings each):")
    for jobs in (0, 4):
        line = ", ".join(f"{name} {us:.1f}" for name, us in costs[jobs].items() if name != "readings")
        print(f"  {jobs} jobs on every reading: {line}")


def reads(args, engine: str) -> None:
    from portal.jobs.models import Job

    Job.objects.all().delete()  # the reads below see the seeded jobs alone
    began = time.perf_counter()
    seeded = seed_spans()
    took = time.perf_counter() - began
    if args.postgres and not args.no_analyze:
        from django.db import connection

        # What autovacuum does after a bulk load (this machine's cluster runs with it off): without
        # statistics the planner takes 100 job ids for half the spans and scans them all.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    print(f"\n{seeded['spans']:,} spans of {seeded['jobs']:,} jobs stored in {took:.0f} s ({engine}, {machine_load()})")
    for name, p50, p95 in read_times(seeded, args.runs):
        verdict = "ok" if p95 < TARGET_MS else "OVER"
        print(f"  {name:30} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms   (target p95 < {TARGET_MS:.0f} ms: {verdict})")


if __name__ == "__main__":
    main()
