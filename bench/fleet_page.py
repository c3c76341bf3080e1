"""Server time and HTML size of the pages, at fleet size: the fleet page beside a host's GPU rows,
the heatmap state, the host page and the GPU page.

Standalone: uses DATABASE_URL when set, else a temporary SQLite database. Seeds `--hosts` × `--gpus`
GPUs (default 125 × 8 = 1,000) with a latest reading each (some hot, some silent), 2.5 maintenance
records per GPU (cleanings, driver updates, host backups), and a few open tickets; then the same at
`--large` GPUs (default 5,000). Each page is requested `--runs` times through Django's test client
(the whole request: middleware, view, template) by a signed-in viewer; prints the median time, the
size and the ratio to the GPU page's time beside the targets (the fleet page under 200 ms and under
200 KiB at both sizes), with the machine's load (the figures follow it).

    .venv/bin/python bench/fleet_page.py [--hosts 125] [--gpus 8] [--large 5000] [--runs 7]
"""

import argparse
import datetime as dt
import os
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


PAGES = [  # (name, URL, targeted)
    ("fleet page /", "/", True),
    ("  needs attention /?attention=1", "/?attention=1", True),
    ("  a host's GPU rows (on demand)", "/hosts/{host}/gpus/", False),
    ("  heatmap state (JSON, fetched)", "/live/fleet/state/", False),
    ("host page", "/hosts/{host}/", False),
    ("GPU page", "/gpus/{gpu}/", False),
]


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


def report(label: str, client, host: str, gpu: str, runs: int) -> dict:
    """Each page's median ms, KiB and status, printed beside the targets and the GPU page."""
    figures = {}
    for name, url, _ in PAGES:
        url = url.format(host=host, gpu=gpu)
        client.get(url)  # warm: templates compiled, caches filled
        ms, size, status = measure(client, url, runs)
        figures[name] = (ms, size / 1024, status)
    gpu_ms = figures["GPU page"][0]
    print(f"\n{label}, {load()}")
    print(f"  {'page':<34} {'server ms':>10} {'size KiB':>10} {'× GPU page':>11}   target")
    for name, _, targeted in PAGES:
        ms, kib, status = figures[name]
        target = f"< {TARGET_MS:.0f} ms, < {TARGET_KIB:.0f} KiB" if targeted else "(side by side)"
        flag = ""
        if targeted and (ms >= TARGET_MS or kib >= TARGET_KIB):
            flag = "  MISSED"
        if status != 200:
            flag = f"  HTTP {status}"
        print(f"  {name:<34} {ms:>10.1f} {kib:>10.1f} {ms / gpu_ms:>11.1f}   {target}{flag}")
    return figures


def summary(results: list[tuple[str, dict]]) -> bool:
    """The fleet page at each size beside its targets and the GPU page; True when all are met."""
    print(f"\nThe fleet page beside its targets ({load()}):")
    print(f"  {'fleet':<12} {'server ms':>10} {'target':>9} {'HTML KiB':>10} {'target':>9} {'× GPU page':>11}")
    ok = True
    for label, figures in results:
        for name in ("fleet page /", "  needs attention /?attention=1"):
            ms, kib, status = figures[name]
            met = ms < TARGET_MS and kib < TARGET_KIB and status == 200
            ok &= met
            what = label if name == "fleet page /" else "  attention"
            print(f"  {what:<12} {ms:>10.1f} {'< ' + format(TARGET_MS, '.0f'):>9} {kib:>10.1f}"
                  f" {'< ' + format(TARGET_KIB, '.0f'):>9} {ms / figures['GPU page'][0]:>11.1f}"
                  f"{'' if met else '  MISSED'}")  # fmt: skip
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
        DEBUG="false", SECRET_KEY="bench-" + uuid.uuid4().hex, PLAIN_HTTP="true", LOG_LEVEL="WARNING",
        DJANGO_SETTINGS_MODULE="bench.settings_pages",
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
    from portal.fleet.models import Gpu, Host, MaintenanceRecord
    from portal.maintenance.models import Ticket

    role_permissions_sync()
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(f"bench-{uuid.uuid4().hex[:6]}", password="x")
    user.groups.add(Group.objects.get(name=ROLE_VIEWER))
    client = Client()
    client.force_login(user)

    tag = uuid.uuid4().hex[:6]
    results = []
    try:
        host, gpu = seed(hosts=args.hosts, gpus=args.gpus, tag=tag)
        size = f"{args.hosts * args.gpus:,} GPUs"
        results.append((size, report(f"{size} ({args.hosts} hosts × {args.gpus})", client, host, gpu, args.runs)))
        if args.large > args.hosts * args.gpus:
            more_hosts = (args.large - args.hosts * args.gpus) // args.gpus
            seed(hosts=more_hosts, gpus=args.gpus, tag=tag + "x")
            total = Gpu.objects.filter(host__hostname__startswith=f"bench-{tag}").count()
            size = f"{total:,} GPUs"
            results.append((size, report(f"{size} ({total // args.gpus} hosts × {args.gpus})", client, host, gpu,
                                         args.runs)))  # fmt: skip
    finally:
        if tmp is None:  # a shared database: leave it as found (GPUs and records hold their hosts)
            ours = {"host__hostname__startswith": f"bench-{tag}"}
            Ticket.objects.filter(**ours).delete()
            MaintenanceRecord.objects.filter(**ours).delete()
            Gpu.objects.filter(**ours).delete()
            Host.objects.filter(hostname__startswith=f"bench-{tag}").delete()
            user.delete()
    ok = summary(results)
    print("\nall fleet-page targets met" if ok else "\nsome fleet-page targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
