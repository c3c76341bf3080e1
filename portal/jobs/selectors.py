"""Reading jobs and their spans (portal-api-v1.md, "Jobs on GPUs"): a constant number of queries
whatever the number of jobs, spans or GPUs."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, QuerySet

from portal.core.errors import NotFound
from portal.jobs.models import Job, JobSpan
from portal.maintenance.models import Ticket
from portal.telemetry.models import GpuLatest

# The hardware tickets a job counts (portal-api-v1.md: XID, ECC, PCIe, thermal, fell off the bus,
# diagnostic), by rule.
HARDWARE_RULES = frozenset({
    "xid_bus", "xid_ecc", "xid_nvlink", "xid_hardware", "ecc_uncorrected", "ecc_corrected_rate", "memory_pending",
    "remap_failure", "pcie", "overheat", "thermal_throttle", "diagnostic_failed", "diagnostic_warned",
})  # fmt: skip
# A ticket opened on a GPU at t counts against a job "while it ran" when one of its spans there runs
# from at most t to at least t - RAN_SLACK: the fault (an XID between two readings) may come after
# the job's last reading, before the next one shows it gone.
RAN_SLACK = dt.timedelta(minutes=1)
# ...and interrupted it when the job left that GPU within this long after.
INTERRUPT_WITHIN = dt.timedelta(minutes=10)


def ran_at(span, at: dt.datetime) -> bool:
    return span.started_at <= at <= span.ended_at + RAN_SLACK


def latest_times(gpu_ids) -> dict[int, dt.datetime]:
    """Each GPU's newest reading time: a span that reaches it is running."""
    return dict(GpuLatest.objects.filter(gpu_id__in=set(gpu_ids)).values_list("gpu_id", "ts"))


def spans_mark_running(spans: list[JobSpan]) -> list[JobSpan]:
    latest = latest_times(span.gpu_id for span in spans)
    for span in spans:
        newest = latest.get(span.gpu_id)
        span.running = newest is not None and span.ended_at >= newest
    return spans


def gpu_spans(*, gpu_id: int, start: dt.datetime | None = None, end: dt.datetime | None = None,
              limit: int | None = None) -> list[JobSpan]:  # fmt: skip
    """The GPU's spans overlapping [start, end], newest first, `running` set. Two queries."""
    query = JobSpan.objects.filter(gpu_id=gpu_id).select_related("job", "gpu__host").order_by("-started_at", "-id")
    if start is not None:
        query = query.filter(ended_at__gte=start)
    if end is not None:
        query = query.filter(started_at__lte=end)
    spans = list(query[:limit] if limit else query)
    return spans_mark_running(spans)


def job_list(
    *, start: dt.datetime | None = None, end: dt.datetime | None = None, user: str = "", host: str = "",
    interrupted: bool | None = None, idle: bool | None = None,
) -> QuerySet[Job]:  # fmt: skip
    """Jobs overlapping [start, end], newest first, narrowed by the filters given."""
    jobs = Job.objects.all()
    if start is not None:
        jobs = jobs.filter(ended_at__gte=start)
    if end is not None:
        jobs = jobs.filter(started_at__lte=end)
    if user:
        jobs = jobs.filter(user=user)
    if host:
        jobs = jobs.filter(Exists(JobSpan.objects.filter(job=OuterRef("pk"), gpu__host__hostname=host)))
    if interrupted is not None:
        jobs = jobs.filter(interrupted=interrupted)
    if idle is not None:
        jobs = jobs.filter(idle=idle)
    return jobs.order_by("-started_at", "-id")


def job_get(*, key: str) -> Job:
    job = Job.objects.filter(key=key).first()
    if job is None:
        raise NotFound(f"no job {key!r} was ever seen")
    return job


@dataclass
class JobDetail:
    job: Job
    spans: list[JobSpan]
    tickets: list[Ticket]

    @property
    def running(self) -> bool:
        return any(span.running for span in self.spans)


def jobs_detail(jobs: list[Job]) -> list[JobDetail]:
    """The jobs with their spans (GPUs, `running` set) and the hardware tickets opened on their GPUs
    while they ran. Four queries, whatever the number of jobs."""
    if not jobs:
        return []
    spans: dict[int, list[JobSpan]] = defaultdict(list)
    every = list(JobSpan.objects.filter(job__in=jobs).select_related("gpu__host", "job").order_by("started_at", "id"))
    spans_mark_running(every)
    for span in every:
        spans[span.job_id].append(span)
    tickets = _tickets_on(every)
    details = []
    for job in jobs:
        its = spans.get(job.pk, [])
        hit = [t for t in tickets if any(s.gpu_id == t.gpu_id and ran_at(s, t.first_seen) for s in its)]
        details.append(JobDetail(job=job, spans=its, tickets=hit))
    return details


def _tickets_on(spans: list[JobSpan]) -> list[Ticket]:
    if not spans:
        return []
    start = min(span.started_at for span in spans)
    end = max(span.ended_at for span in spans) + RAN_SLACK
    return list(
        Ticket.objects.filter(
            gpu_id__in={span.gpu_id for span in spans}, rule__in=HARDWARE_RULES, first_seen__gte=start,
            first_seen__lte=end,
        ).select_related("gpu").order_by("first_seen", "id")
    )  # fmt: skip


def tickets_jobs(*, tickets: list) -> dict[int, list[str]]:
    """The job keys on each ticket's GPU when it opened ({ticket id: keys}). One query."""
    on_gpu = [ticket for ticket in tickets if ticket.gpu_id is not None]
    if not on_gpu:
        return {ticket.pk: [] for ticket in tickets}
    spans = JobSpan.objects.filter(
        gpu_id__in={ticket.gpu_id for ticket in on_gpu},
        started_at__lte=max(ticket.first_seen for ticket in on_gpu),
        ended_at__gte=min(ticket.first_seen for ticket in on_gpu) - RAN_SLACK,
    ).values_list("gpu_id", "started_at", "ended_at", "job__key")
    rows = list(spans)
    out = {}
    for ticket in tickets:
        keys = {
            key
            for gpu_id, started, ended, key in rows
            if gpu_id == ticket.gpu_id and started <= ticket.first_seen <= ended + RAN_SLACK
        }
        out[ticket.pk] = sorted(keys)
    return out


def gpu_jobs_panel(*, gpu_id: int, last: int = 5) -> dict:
    """The GPU page's panel: the running jobs and the last ones. Two queries."""
    spans = gpu_spans(gpu_id=gpu_id, limit=last + 8)
    running = [span for span in spans if span.running]
    return {"running": running, "recent": [span for span in spans if not span.running][:last]}
