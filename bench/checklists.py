"""Checklist pages at fleet size: a technician's "My work" and a run's page, server time and
queries, with 1,000 GPUs (125 hosts × 8) and 10,000 past runs.

Standalone: uses DATABASE_URL when set, else a temporary SQLite database. Seeds a tenth of the
data first and counts each page's queries, then the rest and counts again: the counts must not
change. Server time is the whole Django request in process (middleware, views, templates),
measured over `--requests` requests after a warm-up; the target is p95 under 100 ms.

    .venv/bin/python bench/checklists.py [--hosts 125] [--gpus 8] [--runs 10000] [--requests 40]
"""

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import django_setup  # noqa: E402

TARGET_MS = 100.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=125)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    tmp = django_setup(DEBUG="true")  # DEBUG: static files from the apps' folders, no collectstatic
    from portal.core import engine

    seeder = Seeder(args)
    seeder.seed(hosts=max(1, args.hosts // 10), runs=args.runs // 10)
    small = seeder.measure(requests=5)
    seeder.seed(hosts=args.hosts - max(1, args.hosts // 10), runs=args.runs - args.runs // 10)
    full = seeder.measure(requests=args.requests)
    print(f"checklists bench: {seeder.gpu_count} GPUs, {seeder.run_count} runs ({engine.name()})")
    ok = True
    for page in full:
        times = sorted(full[page]["ms"])
        p50 = statistics.median(times)
        p95 = times[max(0, int(len(times) * 0.95) - 1)]
        constant = small[page]["queries"] == full[page]["queries"]
        if page == "reference":
            print(f"  {page:9} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms (the records page, for scale; not judged)")
            continue
        ok &= p95 < TARGET_MS and constant
        print(
            f"  {page:9} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms (target < {TARGET_MS:.0f})   queries "
            f"{full[page]['queries']} (at a tenth of the data: {small[page]['queries']}, "
            f"{'constant' if constant else 'GROWS'})"
        )
    print("verdict:", "PASS" if ok else "FAIL")
    if tmp:
        tmp.cleanup()
    return 0 if ok else 1


class Seeder:
    def __init__(self, args):
        from django.contrib.auth import get_user_model

        from portal.accounts.services import user_set_role

        self.args = args
        self.gpu_count = self.run_count = 0
        self.host_number = 0
        self.user, _ = get_user_model().objects.get_or_create(username="bench-tech")
        user_set_role(user=self.user, role="technician")

    def seed(self, *, hosts: int, runs: int) -> None:
        from django.utils import timezone

        from portal.checklists.models import ChecklistAnswer, ChecklistRun, ChecklistTemplate
        from portal.checklists.services import item_snapshot
        from portal.fleet.models import Gpu, Host, MaintenanceRecord
        from portal.maintenance.models import Ticket

        now = timezone.now()
        new_hosts = Host.objects.bulk_create([Host(hostname=f"bench-{self.host_number + h:04d}") for h in range(hosts)])
        self.host_number += hosts
        Gpu.objects.bulk_create(
            [
                Gpu(uuid=f"GPU-bench-{host.hostname}-{i}", host=host, index=i, model_name="NVIDIA H100")
                for host in new_hosts
                for i in range(self.args.gpus)
            ]
        )
        self.gpu_count += hosts * self.args.gpus
        # Records of every scheduled kind (My work computes what comes due), tickets a checklist resolves.
        kinds = ["cleaning", "connection_check", "driver_update", "backup"]
        MaintenanceRecord.objects.bulk_create(
            [
                MaintenanceRecord(
                    kind=kind,
                    host=host,
                    performed_at=now - dt.timedelta(days=20 + 30 * n + h % 60),
                    performed_by="bench",
                    dust_level="light" if kind == "cleaning" else "",
                )  # fmt: skip
                for h, host in enumerate(new_hosts)
                for n, kind in enumerate(kinds)
            ]
        )
        Ticket.objects.bulk_create(
            [
                Ticket(
                    fingerprint=f"schedule_cleaning/host/{host.pk}",
                    rule="schedule_cleaning",
                    host=host,
                    title=f"Cleaning due: host {host.hostname}",
                    severity="info",
                    first_seen=now,
                    last_seen=now,
                )  # fmt: skip
                for host in new_hosts[::3]
            ]
        )
        templates = list(ChecklistTemplate.objects.prefetch_related("items"))
        snapshots = {t.pk: [item_snapshot(i) for i in t.items.all()] for t in templates}
        all_hosts = list(Host.objects.filter(hostname__startswith="bench-"))
        batch = []
        for n in range(runs):
            template = templates[n % len(templates)]
            started = now - dt.timedelta(hours=2 * (self.run_count + n) % 8000 + 1)
            in_progress = n % 500 == 0
            batch.append(
                ChecklistRun(
                    template=template,
                    template_version=1,
                    template_name=template.name,
                    record_kind=template.record_kind,
                    items=snapshots[template.pk],
                    host=all_hosts[n % len(all_hosts)],
                    started_at=started,
                    started_by=self.user,
                    state="in_progress" if in_progress else "completed",
                    completed_at=None if in_progress else started + dt.timedelta(minutes=20),
                    completed_by=None if in_progress else self.user,
                    signature="" if in_progress else "Bench Tech",
                )  # fmt: skip
            )
        created = ChecklistRun.objects.bulk_create(batch, batch_size=1000)
        self.run_count += runs
        answers = []
        gpus_through = []
        gpu_ids = {}
        for gpu_id, host_id in Gpu.objects.filter(host__in=all_hosts).values_list("pk", "host_id"):
            gpu_ids.setdefault(host_id, []).append(gpu_id)
        for run in created:
            for item in run.items:
                if item["kind"] in ("photo",):
                    continue
                value = {"check": True, "pass_fail": "pass", "number": 2, "text": "bench",
                         "choice": (item.get("options") or [None])[0], "auto": "pass"}[item["kind"]]  # fmt: skip
                answers.append(
                    ChecklistAnswer(
                        run=run,
                        item_key=item["key"],
                        value=value,
                        answered_by=None if item["kind"] == "auto" else self.user,
                        answered_at=run.started_at,
                        outcome="pass" if item["kind"] == "auto" else "",
                        evidence={"summary": "bench", "gpus": []} if item["kind"] == "auto" else {},
                    )  # fmt: skip
                )
            gpus_through += [ChecklistRun.gpus.through(checklistrun_id=run.pk, gpu_id=g) for g in gpu_ids[run.host_id]]
        ChecklistAnswer.objects.bulk_create(answers, batch_size=2000)
        ChecklistRun.gpus.through.objects.bulk_create(gpus_through, batch_size=5000)
        self.pages = {
            "my work": "/checklists/",
            "run page": ChecklistRun.objects.filter(state="completed").order_by("-pk").first().get_absolute_url(),
            "open run": ChecklistRun.objects.filter(state="in_progress").order_by("-pk").first().get_absolute_url(),
            # Not judged: a plain list page of the portal at the same moment, to read the others by
            # (on a loaded machine every page is slower).
            "reference": "/records/",
        }

    def measure(self, *, requests: int) -> dict:
        from django.db import connection
        from django.test import Client

        client = Client()
        client.force_login(self.user)
        out = {}
        for page, url in self.pages.items():
            for _ in range(3):  # warm-up: templates compiled, connection open, caches filled
                assert client.get(url, HTTP_HOST="localhost").status_code == 200, page
            queries: list[str] = []

            def count(execute, sql, *rest, seen=queries):
                seen.append(sql)
                return execute(sql, *rest)

            with connection.execute_wrapper(count):
                client.get(url, HTTP_HOST="localhost")
            times = []
            for _ in range(requests):
                start = time.perf_counter()
                response = client.get(url, HTTP_HOST="localhost")
                times.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200
            out[page] = {"ms": times, "queries": len(queries)}
        return out


if __name__ == "__main__":
    sys.exit(main())
