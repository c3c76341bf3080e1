"""The demo's jobs: a week of job spans on every demo GPU before the simulated agents' live ones,
and the names of the simulated Slurm jobs.

- History: back-to-back jobs of three users (alice in the vision account, bob in nlp, chen in
  students) on the demo hosts over the last 7 days (the simulated hosts up to where their day of
  backfilled readings begins: those readings name their own jobs), skipping the hours a GPU was
  out for repair. Told on purpose: alice's run on dgx-01 GPUs 0 and 1, three jobs back to back
  at 95 % for 90 hours (flat out past the 72-hour rest policy); alice's job on sim-desk-c GPUs 0
  and 1 that the XID 79 of the repair story interrupted (its job page shows the GPU-hours lost);
  bob's notebook job that has held two GPUs of ws-lab-03 for hours at 1 % (idle).
- Names: the simulated agents run Slurm jobs that no Slurm ever saw (agents/simulate.py); what
  `sacct` would answer for them comes from the simulator's own schedule (`simulated_jobs_name`,
  run now and then by `manage.py demo_job_names` while the demo runs).
"""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict

from django.db import transaction
from django.utils import timezone

from agents.simulate import host_job_schedule
from portal.demo.repair import HOSTNAME as XID_HOST
from portal.demo.repair import INDEX as XID_INDEX
from portal.fleet.models import Gpu, GpuStatusChange
from portal.jobs.models import Job, JobSpan
from portal.jobs.spans import job_figures_refresh
from portal.maintenance.models import Ticket

ACCOUNTS = {"alice": "vision", "bob": "nlp", "chen": "students"}
USER_WEIGHTS = (("alice", 5), ("bob", 3), ("chen", 2))
HISTORY = dt.timedelta(days=7)
SEEDED_FROM = 7_000_000  # seeded Slurm job ids: far from the simulator's (100000-999999)
READING_S = 2.0
FLAT_OUT = ("dgx-01", (0, 1), 3, dt.timedelta(hours=30), 95.0)  # host, GPUs, jobs, each this long, at this %
IDLE = ("ws-lab-03", (2, 3), dt.timedelta(hours=5), 1.0)  # bob's notebook: host, GPUs, held so long, at this %


def _blocked(gpus: list[Gpu], now: dt.datetime) -> dict[int, list[tuple[dt.datetime, dt.datetime]]]:
    """Each GPU's hours out of service (its status history), where no job may have run."""
    changes = defaultdict(list)
    for gpu_id, at, status in (
        GpuStatusChange.objects.filter(gpu__in=gpus)
        .order_by("changed_at", "id")
        .values_list("gpu_id", "changed_at", "to_status")
    ):
        changes[gpu_id].append((at, status))
    blocked = defaultdict(list)
    for gpu_id, rows in changes.items():
        for i, (at, status) in enumerate(rows):
            if status != Gpu.Status.IN_SERVICE:
                blocked[gpu_id].append((at, rows[i + 1][0] if i + 1 < len(rows) else now))
    return blocked


class _Plan:
    """Jobs and their spans, written at the end in three statements."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.jobs: list[dict] = []
        self.spans: list[tuple[int, Gpu, dt.datetime, dt.datetime, float]] = []  # (job index, gpu, start, end, %)

    def job(self, user: str, name: str, gpus, start: dt.datetime, end: dt.datetime, util: float, **extra) -> int:
        index = len(self.jobs)
        self.jobs.append({"key": f"slurm:{SEEDED_FROM + index}", "user": user, "name": name, **extra})
        for gpu in gpus:
            self.spans.append((index, gpu, start, end, util))
        return index

    def write(self) -> dict[int, Job]:
        jobs = Job.objects.bulk_create(
            [Job(key=j["key"], scheduler=Job.Scheduler.SLURM, user=j["user"], account=ACCOUNTS[j["user"]],
                 name=j["name"], lookup=Job.Lookup.DONE, started_at=timezone.now(), ended_at=timezone.now())
             for j in self.jobs]
        )  # fmt: skip
        rows = []
        for index, gpu, start, end, util in self.spans:
            hours = (end - start).total_seconds() / 3600
            readings = max(1, int(hours * 3600 / READING_S))
            watts = (gpu.power_limit_default_w or 300.0) * (0.12 + 0.85 * util / 100)
            extra = self.jobs[index].get("interrupted_by")
            memory_share = self.rng.uniform(0.6, 0.93)
            rows.append(JobSpan(
                job=jobs[index], gpu=gpu, started_at=start, ended_at=end, readings=readings,
                utilization_sum=util * readings, utilization_count=readings,
                memory_used_max_mib=int((gpu.memory_total_mib or 24564) * (0.2 if util < 5 else memory_share)),
                temperature_max_c=int(38 + util * 0.42 + self.rng.uniform(0, 6)), throttled_count=0,
                energy_mj=watts * hours * 3.6e6, energy_last_mj=0.0, interrupted_by=extra,
                gpu_hours_lost=hours if extra is not None else 0.0,
            ))  # fmt: skip
        JobSpan.objects.bulk_create(rows, batch_size=500)
        job_figures_refresh(job_ids={job.pk for job in jobs})
        return dict(enumerate(jobs))


def _free(start: dt.datetime, end: dt.datetime, gpus, blocked) -> dt.datetime | None:
    """Where a job of [start, end) fits on all these GPUs: start itself, or None when one was out."""
    for gpu in gpus:
        for a, b in blocked.get(gpu.pk, []):
            if a < end and start < b:
                return None
    return start


def _timeline(plan: _Plan, gpus, begin: dt.datetime, until: dt.datetime, blocked) -> None:
    """Back-to-back jobs on these GPUs (together) from begin to until."""
    rng = plan.rng
    t = begin + dt.timedelta(minutes=rng.uniform(0, 90))
    while True:
        end = t + dt.timedelta(hours=rng.uniform(2, 14))
        if end > until:
            return
        if _free(t, end, gpus, blocked) is None:
            t += dt.timedelta(hours=1)
            continue
        user = rng.choices([u for u, _ in USER_WEIGHTS], [w for _, w in USER_WEIGHTS])[0]
        share = gpus if rng.random() < 0.6 else gpus[:1]
        plan.job(user, rng.choice(["train-resnet", "finetune-llm", "eval-sweep", "diffusion"]), share, t, end,
                 rng.uniform(55, 97))  # fmt: skip
        t = end + dt.timedelta(minutes=rng.choice([3, 20, 60, 150]))


def _xid_ticket() -> Ticket | None:
    """The repair story's XID 79 on sim-desk-c GPU 0 (portal/demo/repair.py): the first one."""
    return (
        Ticket.objects.filter(gpu__host__hostname=XID_HOST, gpu__index=XID_INDEX, rule="xid_bus")
        .order_by("first_seen")
        .first()
    )


@transaction.atomic
def jobs_history_seed(*, now: dt.datetime | None = None, live_from: dt.datetime | None = None) -> int:
    """The week of jobs (see the module's text), once. `live_from`: where the simulated hosts'
    readings (and so their own spans) begin. Returns the number of jobs written."""
    if Job.objects.filter(key=f"slurm:{SEEDED_FROM}").exists():
        return 0
    from portal.demo.management.commands.seed_demo import DEMO_HOSTS
    from portal.demo.story import SIMULATED_HOSTS

    now = now or timezone.now()
    begin, live_from = now - HISTORY, live_from or now - dt.timedelta(days=1)
    simulated = {hostname for hostname, *_ in SIMULATED_HOSTS}
    gpus = list(
        Gpu.objects.filter(host__hostname__in=[*simulated, *(row[0] for row in DEMO_HOSTS)]).select_related("host")
    )
    by_host = defaultdict(dict)
    for gpu in gpus:
        by_host[gpu.host.hostname][gpu.index] = gpu
    # The simulated GPUs registered when their agents first reported (minutes ago): in service
    # since before the week, as the history has them working (the repair story does the same).
    registered = begin - dt.timedelta(days=1)
    Gpu.objects.filter(pk__in=[g.pk for g in gpus], created_at__gt=registered).update(created_at=registered)
    blocked = _blocked(gpus, now)
    plan = _Plan(random.Random(45))
    ticket = _xid_ticket()
    if ticket is not None and XID_HOST in by_host:  # alice's job, 6 hours in when the GPU fell off the bus
        pair = [by_host[XID_HOST][i] for i in (0, 1) if i in by_host[XID_HOST]]
        start = ticket.first_seen - dt.timedelta(hours=6)
        plan.job("alice", "pretrain-vit-l", pair, start, ticket.first_seen, 93.0, interrupted_by=ticket)
        for gpu in pair:  # nothing else on them from then until their repair is over
            blocked[gpu.pk].append((start - dt.timedelta(minutes=30), ticket.first_seen + dt.timedelta(hours=27)))
    flat_host, flat_gpus, flat_jobs, flat_each, flat_util = FLAT_OUT
    if flat_host in by_host:
        pair = [by_host[flat_host][i] for i in flat_gpus if i in by_host[flat_host]]
        t = now - dt.timedelta(hours=100)
        for n in range(flat_jobs):
            plan.job("alice", f"pretrain-llm-stage{n + 1}", pair, t, t + flat_each, flat_util)
            t += flat_each + dt.timedelta(minutes=3)
        for gpu in pair:
            blocked[gpu.pk].append((now - dt.timedelta(hours=101), t + dt.timedelta(hours=1)))
    idle_host, idle_gpus, idle_for, idle_util = IDLE
    if idle_host in by_host:
        pair = [by_host[idle_host][i] for i in idle_gpus if i in by_host[idle_host]]
        plan.job("bob", "jupyter-notebook", pair, now - idle_for, now - dt.timedelta(minutes=1), idle_util)
        for gpu in pair:
            blocked[gpu.pk].append((now - idle_for - dt.timedelta(hours=1), now))
    for hostname, own in sorted(by_host.items()):
        until = live_from - dt.timedelta(minutes=10) if hostname in simulated else now
        indices = sorted(own)
        for pair in (indices[:2], indices[2:4]):
            if pair:
                _timeline(plan, [own[i] for i in pair], begin, until, blocked)
    jobs = plan.write()
    for index, spec in enumerate(plan.jobs):
        if spec.get("interrupted_by") is not None:
            job = Job.objects.get(pk=jobs[index].pk)
            Job.objects.filter(pk=job.pk).update(
                interrupted=True, interrupted_by=spec["interrupted_by"], gpu_hours_lost=job.gpu_hours
            )
    return len(jobs)


def simulated_jobs_name() -> int:
    """What Slurm's accounting would say of the simulated agents' Slurm jobs: their user, account
    and name, from the simulator's schedule (agents/simulate.py). Returns the number named."""
    from portal.demo.story import BACKFILL_JOB_ID_OFFSET, SIMULATED_HOSTS

    schedules = [host_job_schedule(hostname) for hostname, *_ in SIMULATED_HOSTS]
    named = 0
    for pk, key in Job.objects.filter(scheduler=Job.Scheduler.SLURM, user__isnull=True).values_list("id", "key"):
        number = int(key.partition(":")[2]) if key.partition(":")[2].isdigit() else 0
        if number >= BACKFILL_JOB_ID_OFFSET:  # the day of history's (portal/demo/story.py)
            key = f"slurm:{number - BACKFILL_JOB_ID_OFFSET}"
        for schedule in schedules:
            k = schedule.job_number(key)
            if k is not None:
                user = schedule.job_user(k)
                named += Job.objects.filter(pk=pk, user__isnull=True).update(
                    user=user, account=ACCOUNTS[user], name=f"sim-train-{k}", lookup=Job.Lookup.DONE
                )
                break
    return named
