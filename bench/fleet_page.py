"""Server time and HTML size of the pages, at fleet size: the fleet page beside a host's GPU rows,
the heatmap state, the host page and the GPU page.

Standalone: uses DATABASE_URL when set, else a temporary SQLite database. Seeds `--hosts` × `--gpus`
GPUs (default 125 × 8 = 1,000) with a latest reading each (some hot, some silent), 2.5 maintenance
records per GPU (cleanings, driver updates, host backups), and a few open tickets; then the same at
`--large` GPUs (default 5,000). Each page is requested `--runs` times through Django's test client
(the whole request: middleware, view, template) by a signed-in viewer; prints the median time and
the size beside the targets: the fleet page under 200 ms and under 200 KiB at both sizes.

    .venv/bin/python bench/fleet_page.py [--hosts 125] [--gpus 8] [--large 5000] [--runs 7]
"""

import argparse
import datetime as dt
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import django_setup  # noqa: E402

TARGET_MS = 200.0
TARGET_KIB = 200.0


def seed(*, hosts: int, gpus: int, tag: str) -> tuple[str, str]:
    """A fleet of hosts × gpus; returns one host's name and one GPU's uuid."""
    from django.utils import timezone

    from portal.fleet.models import Gpu, Host, MaintenanceRecord
    from portal.maintenance.models import Ticket
    from portal.telemetry.models import GpuLatest

    now = timezone.now()
    created = Host.objects.bulk_create(
        [
            Host(
                hostname=f"bench-{tag}-{h:04d}",
                location="Server room B2",
                rack=f"R{h % 20}",
                driver_version="570.133.20",
            )
            for h in range(hosts)
        ]
    )
    rows = [
        Gpu(uuid=f"GPU-{uuid.uuid4()}", host=host, index=i, model_name="NVIDIA H100 80GB HBM3",
            serial=f"{h:06d}{i:02d}", temp_slowdown_c=87)
        for h, host in enumerate(created) for i in range(gpus)
    ]  # fmt: skip
    made = Gpu.objects.bulk_create(rows)
    latest = []
    for n, gpu in enumerate(made):
        silent = n % 97 == 0  # a few agents stopped
        hot = n % 53 == 0
        ts = now - dt.timedelta(seconds=900 if silent else 5)
        latest.append(GpuLatest(gpu=gpu, ts=ts, received_at=ts, temperature_c=84 if hot else 55 + n % 20,
                                utilization_gpu_pct=90, power_w=550.0, memory_used_mib=40000))  # fmt: skip
    GpuLatest.objects.bulk_create(latest)
    records = []
    record = MaintenanceRecord
    for n, gpu in enumerate(made):  # 2 records per GPU, 1 host backup per 2 GPUs: 2.5 per GPU
        host_id, ago = gpu.host_id, now - dt.timedelta(days=n % 120)
        records.append(record(kind="cleaning", host_id=host_id, gpu=gpu, dust_level="light", performed_at=ago,
                              performed_by="bench"))  # fmt: skip
        records.append(record(kind="driver_update", host_id=host_id, gpu=gpu, from_version="550", to_version="570",
                              performed_at=now - dt.timedelta(days=n % 100), performed_by="bench"))  # fmt: skip
        if n % 2 == 0:
            backup_at = now - dt.timedelta(days=n % 9)
            records.append(record(kind="backup", host_id=host_id, backup_content="both", destination="nas:/b",
                                  verified=True, performed_by="bench", performed_at=backup_at))  # fmt: skip
    MaintenanceRecord.objects.bulk_create(records, batch_size=2000)
    Ticket.objects.bulk_create(
        [
            Ticket(fingerprint=f"overheat/gpu/{gpu.pk}", rule="overheat", host_id=gpu.host_id, gpu=gpu,
                   title="GPU overheating", severity="warning", first_seen=now, last_seen=now)
            for gpu in made[::53]
        ]
    )  # fmt: skip
    return created[0].hostname, made[0].uuid


def measure(client, url: str, runs: int) -> tuple[float, int, int]:
    """Median ms, size in bytes, status."""
    times, size, status = [], 0, 0
    for _ in range(runs):
        t0 = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - t0) * 1000)
        size, status = len(response.content), response.status_code
    return statistics.median(times), size, status


def report(label: str, client, host: str, gpu: str, runs: int) -> bool:
    pages = [
        ("fleet page /", "/", True),
        ("  needs attention /?attention=1", "/?attention=1", True),
        ("  a host's GPU rows (on demand)", f"/hosts/{host}/gpus/", False),
        ("  heatmap state (JSON, fetched)", "/live/fleet/state/", False),
        ("host page", f"/hosts/{host}/", False),
        ("GPU page", f"/gpus/{gpu}/", False),
    ]
    print(f"\n{label}")
    print(f"  {'page':<34} {'server ms':>10} {'size KiB':>10}   target")
    ok = True
    for name, url, targeted in pages:
        client.get(url)  # warm: templates compiled, caches filled
        ms, size, status = measure(client, url, runs)
        kib = size / 1024
        target = f"< {TARGET_MS:.0f} ms, < {TARGET_KIB:.0f} KiB" if targeted else "(side by side)"
        flag = ""
        if targeted and (ms >= TARGET_MS or kib >= TARGET_KIB):
            flag, ok = "  MISSED", False
        if status != 200:
            flag, ok = f"  HTTP {status}", False
        print(f"  {name:<34} {ms:>10.1f} {kib:>10.1f}   {target}{flag}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--large", type=int, default=5000, help="GPUs in the second fleet (0: skip)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    # Production settings (DEBUG off), served over plain HTTP by the test client.
    tmp = django_setup(
        DEBUG="false", SECRET_KEY="bench-" + uuid.uuid4().hex, SECURE_SSL_REDIRECT="false",
        SECURE_COOKIES="false", SECURE_HSTS_SECONDS="0", LIVE_ENABLED="false", LOG_LEVEL="WARNING",
    )  # fmt: skip
    from django.conf import settings
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's hosts, no e-mail going out
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    # Static files are not what is measured: plain URLs, no collectstatic manifest needed.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    from portal.accounts.roles import ROLE_VIEWER
    from portal.accounts.services import role_permissions_sync
    from portal.fleet.models import Gpu, Host
    from portal.maintenance.models import Ticket

    role_permissions_sync()
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(f"bench-{uuid.uuid4().hex[:6]}", password="x")
    user.groups.add(Group.objects.get(name=ROLE_VIEWER))
    client = Client()
    client.force_login(user)

    tag = uuid.uuid4().hex[:6]
    ok = True
    try:
        host, gpu = seed(hosts=args.hosts, gpus=args.gpus, tag=tag)
        ok &= report(
            f"{args.hosts * args.gpus:,} GPUs ({args.hosts} hosts × {args.gpus})", client, host, gpu, args.runs
        )
        if args.large > args.hosts * args.gpus:
            more_hosts = (args.large - args.hosts * args.gpus) // args.gpus
            seed(hosts=more_hosts, gpus=args.gpus, tag=tag + "x")
            total = Gpu.objects.filter(host__hostname__startswith=f"bench-{tag}").count()
            ok &= report(f"{total:,} GPUs ({total // args.gpus} hosts × {args.gpus})", client, host, gpu, args.runs)
    finally:
        if tmp is None:  # a shared database: leave it as found
            Ticket.objects.filter(host__hostname__startswith=f"bench-{tag}").delete()
            Host.objects.filter(hostname__startswith=f"bench-{tag}").delete()
            user.delete()
    print("\nall fleet-page targets met" if ok else "\nsome fleet-page targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
