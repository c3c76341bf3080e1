"""The reliability report at fleet scale: 1,000 GPUs, a year's report, 5 years of history stored.

Standalone: a temporary SQLite database by default, `--postgres` for a scratch PostgreSQL database
`bench_reports` on the local server (dropped and created again). Seeds 125 hosts × 8 GPUs
registered over 5 years (some retired), each with a status history (out for repair and back),
repair records with and without downtime and cost, routine records (cleanings, inspections,
driver updates) and tickets (hardware and others) over the 5 years. Then times
`GET /api/v1/reports/reliability` for the last year through the test client (JSON, CSV, PDF),
median of `--runs`, beside the targets: JSON < 1 s, PDF < 5 s.

    .venv/bin/python bench/reports.py [--postgres] [--hosts 125] [--gpus 8] [--years 5] [--runs 3]
"""

import argparse
import datetime as dt
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import django_setup  # noqa: E402

TARGETS_S = {"json": 1.0, "csv": 1.0, "pdf": 5.0}
PG_URL = "postgres://postgres@127.0.0.1:5432/bench_reports"


def _setup(args):
    if args.postgres:
        for sql in ("DROP DATABASE IF EXISTS bench_reports", "CREATE DATABASE bench_reports"):
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True)
        os.environ["DATABASE_URL"] = PG_URL
        os.environ["VAR_DIR"] = tempfile.mkdtemp()
    else:
        os.environ.pop("DATABASE_URL", None)  # a scratch SQLite database
    return django_setup(DEBUG="true", ALLOWED_HOSTS="testserver")


def seed(*, hosts: int, gpus: int, years: int, now: dt.datetime) -> dict:
    from portal.fleet.models import Gpu, GpuStatusChange, Host, MaintenanceRecord
    from portal.maintenance.models import Ticket

    rng = random.Random(15)
    span = dt.timedelta(days=365 * years)
    begin = now - span
    models = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA L40S"]
    host_rows = Host.objects.bulk_create([Host(hostname=f"bench-{h:03d}", location="hall 1") for h in range(hosts)])
    gpu_rows = []
    for h, host in enumerate(host_rows):
        for i in range(gpus):
            gpu_rows.append(Gpu(uuid=f"GPU-bench-{h:03d}-{i}", serial=f"SN{h:04d}{i:02d}", model_name=models[h % 4],
                                host=host, index=i))  # fmt: skip
    gpu_rows = Gpu.objects.bulk_create(gpu_rows)
    changes, records, tickets, registered, retire = [], [], [], {}, []
    hw_rules = ["xid_bus", "xid_ecc", "ecc_uncorrected", "pcie", "remap_failure"]
    other_rules = ["overheat", "thermal_throttle", "fan_wear", "xid_application", "cleaning_due", "agent_silent"]
    for gpu in gpu_rows:
        reg = begin + dt.timedelta(days=rng.uniform(0, 365 * years * 0.8))
        registered[gpu.pk] = reg
        install = (reg - dt.timedelta(days=rng.randint(0, 60))).date() if rng.random() < 0.7 else None
        gpu.install_date = install
        changes.append(GpuStatusChange(gpu=gpu, changed_at=reg, from_status="", to_status="in_service",
                                       source="registration"))  # fmt: skip
        t = reg
        status = "in_service"
        while True:
            t += dt.timedelta(days=rng.expovariate(1 / 300))
            if t >= now:
                break
            failure_rule = rng.choice(hw_rules)
            tickets.append(Ticket(fingerprint=f"{failure_rule}/gpu/{gpu.pk}/{t.timestamp()}", rule=failure_rule,
                                  host_id=gpu.host_id, gpu=gpu, title=failure_rule, severity="critical",
                                  state="resolved", first_seen=t, last_seen=t,
                                  evidence={"readings": [[t.timestamp(), rng.choice([79, 48, 94])]]}))  # fmt: skip
            out = t + dt.timedelta(hours=rng.uniform(1, 12))
            back = out + dt.timedelta(hours=rng.uniform(4, 240))
            if back >= now:
                break
            changes.append(GpuStatusChange(gpu=gpu, changed_at=out, from_status=status, to_status="out_for_repair",
                                           source="api"))  # fmt: skip
            changes.append(GpuStatusChange(gpu=gpu, changed_at=back, from_status="out_for_repair",
                                           to_status="in_service", source="checklist"))  # fmt: skip
            records.append(MaintenanceRecord(
                kind="repair", host_id=gpu.host_id, gpu=gpu, performed_at=back - dt.timedelta(hours=1),
                performed_by="ACME", vendor="ACME", outcome="fixed", rma_number=f"RMA-{gpu.pk}-{len(records)}",
                downtime_hours=Decimal(round((back - out).total_seconds() / 3600, 1)) if rng.random() < 0.8 else None,
                cost=Decimal(rng.randint(50, 4000)) if rng.random() < 0.7 else None))  # fmt: skip
        if rng.random() < 0.05:
            retired_at = reg + (now - reg) * rng.uniform(0.3, 0.99)
            changes.append(GpuStatusChange(gpu=gpu, changed_at=retired_at, from_status="in_service",
                                           to_status="retired", source="api"))  # fmt: skip
            retire.append(gpu.pk)
        # routine care and other tickets, over the GPU's life
        for days in range(0, (now - reg).days, 90):
            at = reg + dt.timedelta(days=days + rng.uniform(0, 30))
            records.append(MaintenanceRecord(kind="cleaning", host_id=gpu.host_id, gpu=gpu, performed_at=at,
                                             performed_by="Li Wei", dust_level="light"))  # fmt: skip
            rule = rng.choice(other_rules)
            tickets.append(Ticket(fingerprint=f"{rule}/gpu/{gpu.pk}/{at.timestamp()}", rule=rule,
                                  host_id=gpu.host_id, gpu=gpu, title=rule, state="resolved", first_seen=at,
                                  last_seen=at, evidence={}))  # fmt: skip
    Gpu.objects.bulk_update(gpu_rows, ["install_date"], batch_size=1000)
    for gpu_pk, at in registered.items():
        Gpu.objects.filter(pk=gpu_pk).update(created_at=at)
    Gpu.objects.filter(pk__in=retire).update(status="retired")
    for host in host_rows:  # host-wide records: never GPU repairs
        for days in range(0, span.days, 180):
            records.append(
                MaintenanceRecord(
                    kind="backup",
                    host=host,
                    performed_by="cron",
                    backup_content="both",
                    destination="nas",
                    performed_at=begin + dt.timedelta(days=days),
                )
            )
    GpuStatusChange.objects.bulk_create(changes, batch_size=2000)
    MaintenanceRecord.objects.bulk_create(records, batch_size=2000)
    Ticket.objects.bulk_create(tickets, batch_size=2000)
    return {"gpus": len(gpu_rows), "status_changes": len(changes), "records": len(records), "tickets": len(tickets),
            "repairs": sum(r.kind == "repair" for r in records)}  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true", help="scratch PostgreSQL database bench_reports")
    parser.add_argument("--hosts", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--years", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", choices=["json", "csv", "pdf"], help="print a cProfile of one request")
    args = parser.parse_args()
    tmp = _setup(args)
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from portal.accounts.services import user_set_role
    from portal.core import engine

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    t0 = time.perf_counter()
    counts = seed(hosts=args.hosts, gpus=args.gpus, years=args.years, now=now)
    seeded_s = time.perf_counter() - t0
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("auditor", password="x")
    user_set_role(user=user, role="viewer")
    client = Client()
    client.force_login(user)
    period = {"from": (now - dt.timedelta(days=365)).isoformat(), "to": now.isoformat()}
    print(f"database: {engine.name()}; seeded in {seeded_s:.1f} s: " + ", ".join(f"{v:,} {k}" for k, v in
                                                                                     counts.items()))  # fmt: skip
    print(f"report {period['from']} .. {period['to']}, median of {args.runs} runs")
    print(f"{'format':<8}{'median s':>10}{'target s':>10}{'queries':>9}{'bytes':>11}  verdict")
    failed = False
    for fmt in ("json", "csv", "pdf"):
        times = []
        for _ in range(args.runs):
            with CaptureQueriesContext(connection) as queries:
                start = time.perf_counter()
                response = client.get("/api/v1/reports/reliability", {**period, "format": fmt})
                times.append(time.perf_counter() - start)
            assert response.status_code == 200, response.content[:500]
        median = statistics.median(times)
        ok = median < TARGETS_S[fmt]
        failed |= not ok
        print(f"{fmt:<8}{median:>10.3f}{TARGETS_S[fmt]:>10.1f}{len(queries):>9}{len(response.content):>11,}  "
              f"{'ok' if ok else 'TOO SLOW'}")  # fmt: skip
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(client.get, "/api/v1/reports/reliability", {**period, "format": args.profile})
        pstats.Stats(profiler).sort_stats("cumulative").sort_stats("tottime").print_stats(20)
    if tmp is not None:
        tmp.cleanup()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
