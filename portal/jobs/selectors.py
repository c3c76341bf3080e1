"""Reading jobs and their spans (portal-api-v1.md, "Jobs on GPUs"): a constant number of queries
whatever the number of jobs, spans or GPUs."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Exists, F, OuterRef, Q, QuerySet

from portal.core.errors import NotFound
from portal.fleet import selectors as fleet
from portal.jobs.models import SPAN_GAP, Job, JobSpan
from portal.maintenance import selectors as maintenance
from portal.telemetry import selectors as telemetry

if TYPE_CHECKING:
    from portal.maintenance.models import Ticket

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


# A span's own columns, as the API and pages show it (its GPU and host come joined).
SPAN_COLUMNS = (
    "job_id", "gpu_id", "started_at", "ended_at", "readings", "utilization_sum", "utilization_count",
    "memory_used_max_mib", "temperature_max_c", "throttled_count", "energy_mj",
)  # fmt: skip


def ran_at(span, at: dt.datetime) -> bool:
    return span.started_at <= at <= span.ended_at + RAN_SLACK


def latest_times(gpu_ids) -> dict[int, dt.datetime]:
    """Each GPU's newest reading time: a span that reaches it is running."""
    return dict(telemetry.latest_readings().filter(gpu_id__in=set(gpu_ids)).values_list("gpu_id", "ts"))


def spans_mark_running(spans: list[JobSpan]) -> list[JobSpan]:
    latest = latest_times(span.gpu_id for span in spans) if spans else {}
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


def jobs_search(*, query: str, limit: int) -> list[Job]:
    """The jobs a search names (the search page): by key (`slurm:4211`, or the id alone), user,
    account or name, newest first. One query."""
    query = query.strip()
    if not query:
        return []
    found = Job.objects.filter(
        Q(key__icontains=query) | Q(user__iexact=query) | Q(account__iexact=query) | Q(name__icontains=query)
    )
    return list(found.order_by("-ended_at", "-id")[:limit])


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
    while they ran. Two queries, whatever the number of jobs."""
    if not jobs:
        return []
    spans: dict[int, list[JobSpan]] = defaultdict(list)
    by_pk = {job.pk: job for job in jobs}
    # Each span's GPU, host and the GPU's newest reading time (running) in the one query.
    every = list(
        JobSpan.objects.filter(job_id__in=list(by_pk)).select_related("gpu__host")
        .only(*SPAN_COLUMNS, "gpu__uuid", "gpu__index", "gpu__host_id", "gpu__host__hostname")
        .annotate(newest=F("gpu__latest__ts")).order_by("started_at", "id")
    )  # fmt: skip
    for span in every:
        span.running = span.newest is not None and span.ended_at >= span.newest
        span.job = by_pk[span.job_id]
        spans[span.job_id].append(span)
    tickets = _tickets_on(every, job_ids=list(by_pk))
    details = []
    for job in jobs:
        its = spans.get(job.pk, [])
        hit = [t for t in tickets if any(s.gpu_id == t.gpu_id and ran_at(s, t.first_seen) for s in its)]
        details.append(JobDetail(job=job, spans=its, tickets=hit))
    return details


# A span as the API writes it, read as a row: its own columns, its GPU's uuid and host, and the
# GPU's newest reading time (`running`).
SPAN_ROW = (*SPAN_COLUMNS, "gpu__uuid", "gpu__host__hostname", "gpu__latest__ts")
# A hardware ticket as a job's answer shows it, read as a row.
TICKET_ROW = ("id", "title", "severity", "gpu_id", "gpu__uuid", "first_seen")


@dataclass
class JobRows:
    """A job with its spans (SPAN_ROW named tuples, oldest first) and the hardware tickets opened on
    its GPUs while it ran (TICKET_ROW named tuples, oldest first): what the API writes
    (figures.job_out)."""

    job: Job
    spans: list[tuple]
    tickets: list[tuple]


def jobs_rows(jobs: list[Job]) -> list[JobRows]:
    """jobs_detail's answer as rows, for the API: a page of 100 jobs holds 400 spans, and a model
    instance each for a span, its GPU and its host cost most of the request. Two queries, whatever
    the number of jobs."""
    if not jobs:
        return []
    job_ids = [job.pk for job in jobs]
    rows = list(
        JobSpan.objects.filter(job_id__in=job_ids).order_by("started_at", "id").values_list(*SPAN_ROW, named=True)
    )  # fmt: skip
    spans: dict[int, list[tuple]] = defaultdict(list)
    for row in rows:
        spans[row.job_id].append(row)
    tickets = _ticket_rows_on(rows, job_ids=job_ids)
    by_gpu: dict[int, list[tuple[int, tuple]]] = defaultdict(list)
    for n, ticket in enumerate(tickets):
        by_gpu[ticket.gpu_id].append((n, ticket))
    out = []
    for job in jobs:
        its = spans.get(job.pk, [])
        hit = {
            n: ticket for span in its for n, ticket in by_gpu.get(span.gpu_id, ())
            if ran_at(span, ticket.first_seen)
        }  # fmt: skip
        out.append(JobRows(job=job, spans=its, tickets=[hit[n] for n in sorted(hit)]))
    return out


def _ticket_rows_on(rows: list[tuple], *, job_ids: list[int]) -> list[tuple]:
    if not rows:
        return []
    return list(_hardware_tickets_during(rows, job_ids=job_ids).values_list(*TICKET_ROW, named=True))


def _tickets_on(spans: list[JobSpan], *, job_ids: list[int]) -> list[Ticket]:
    if not spans:
        return []
    return list(_hardware_tickets_during(spans, job_ids=job_ids).select_related("gpu"))


def _hardware_tickets_during(spans, *, job_ids: list[int]) -> QuerySet[Ticket]:
    """The hardware tickets opened on the jobs' GPUs between their first span's start and their
    last span's end (with RAN_SLACK), oldest first: span rows or instances alike."""
    start = min(span.started_at for span in spans)
    end = max(span.ended_at for span in spans) + RAN_SLACK
    gpus = JobSpan.objects.filter(job_id__in=job_ids).values("gpu_id")  # a subquery: no list of ids to send
    return maintenance.tickets().filter(
        gpu_id__in=gpus, rule__in=HARDWARE_RULES, first_seen__gte=start, first_seen__lte=end,
    ).order_by("first_seen", "id")  # fmt: skip


def tickets_jobs(*, tickets: list) -> dict[int, list[str]]:
    """The job keys on each ticket's GPU when it opened ({ticket id: keys}). One query."""
    return {pk: [job["key"] for job in jobs] for pk, jobs in tickets_jobs_shown(tickets=tickets).items()}


def tickets_jobs_shown(*, tickets: list) -> dict[int, list[dict]]:
    """The jobs on each ticket's GPU when it opened, by key with their user and name ({ticket id:
    [{key, user, name}, ...]}, by key). One query."""
    on_gpu = [ticket for ticket in tickets if ticket.gpu_id is not None]
    if not on_gpu:
        return {ticket.pk: [] for ticket in tickets}
    rows = list(
        JobSpan.objects.filter(
            gpu_id__in={ticket.gpu_id for ticket in on_gpu},
            started_at__lte=max(ticket.first_seen for ticket in on_gpu),
            ended_at__gte=min(ticket.first_seen for ticket in on_gpu) - RAN_SLACK,
        ).values_list("gpu_id", "started_at", "ended_at", "job__key", "job__user", "job__name")
    )
    out = {}
    for ticket in tickets:
        jobs = {
            key: {"key": key, "user": user, "name": name}
            for gpu_id, started, ended, key, user, name in rows
            if gpu_id == ticket.gpu_id and started <= ticket.first_seen <= ended + RAN_SLACK
        }
        out[ticket.pk] = [jobs[key] for key in sorted(jobs)]
    return out


FLAT_OUT_LOOKBACK = dt.timedelta(days=14)


def gpu_jobs_panel(*, gpu_id: int, now: dt.datetime, last: int = 5) -> dict:
    """The GPU page's panel: the running jobs, the last ones, and its latest stretch flat out past
    the rest policy within FLAT_OUT_LOOKBACK. Two queries for a GPU that ran no job, five at most."""
    spans = gpu_spans(gpu_id=gpu_id, limit=last + 8)
    running = [span for span in spans if span.running]
    stretches = flat_out_stretches(gpu_ids=[gpu_id], start=now - FLAT_OUT_LOOKBACK)
    return {
        "running": running, "recent": [span for span in spans if not span.running][:last],
        "flat_out": stretches[-1] if stretches else None,
    }  # fmt: skip


@dataclass
class FlatOut:
    """A GPU that ran one job or back-to-back jobs flat out for longer than the fleet's rest
    policy (the no_rest rule's `open_for_s` at `busy_util_pct`, as configured for its host)."""

    gpu_id: int
    started_at: dt.datetime
    ended_at: dt.datetime
    jobs: list[str]
    limit_hours: float
    busy_util_pct: float

    @property
    def hours(self) -> float:
        return (self.ended_at - self.started_at).total_seconds() / 3600.0


def flat_out_stretches(*, gpu_ids, start: dt.datetime | None = None, end: dt.datetime | None = None) -> list[FlatOut]:
    """The stretches in [start, end] over which each GPU ran its jobs flat out (every span's mean
    utilisation at or above the rest policy's busy level, the spans back to back: no more than
    SPAN_GAP apart) for longer than the policy allows. Three queries at most, whatever the fleet's size."""
    from portal.maintenance.services.config import RuleParams

    gpu_ids = list(gpu_ids)
    if not gpu_ids:
        return []
    query = JobSpan.objects.filter(gpu_id__in=gpu_ids, utilization_count__gt=0)
    if start is not None:
        query = query.filter(ended_at__gte=start)
    if end is not None:
        query = query.filter(started_at__lte=end)
    rows = query.order_by("gpu_id", "started_at").values_list(
        "gpu_id", "started_at", "ended_at", "utilization_sum", "utilization_count", "job__key"
    )
    by_gpu: dict[int, list[tuple]] = defaultdict(list)
    for row in rows:
        by_gpu[row[0]].append(row)
    if not by_gpu:
        return []
    params = RuleParams()
    hosts = dict(fleet.gpus().filter(pk__in=list(by_gpu)).values_list("pk", "host_id"))
    out = []
    for gpu_id, spans in by_gpu.items():
        _, policy = params.get("no_rest", hosts.get(gpu_id))
        busy, limit = float(policy["busy_util_pct"]), float(policy["open_for_s"])
        out += _stretches(gpu_id, [s for s in spans if s[3] / s[4] >= busy], busy, limit)
    return out


def _stretches(gpu_id: int, spans: list[tuple], busy: float, limit_s: float) -> list[FlatOut]:
    out, current = [], None
    for _, started, ended, _, _, key in spans:
        if current is not None and started - current.ended_at <= SPAN_GAP:
            current.ended_at = max(current.ended_at, ended)
            if key not in current.jobs:
                current.jobs.append(key)
            continue
        if current is not None and current.hours * 3600 > limit_s:
            out.append(current)
        current = FlatOut(gpu_id, started, ended, [key], limit_s / 3600, busy)
    if current is not None and current.hours * 3600 > limit_s:
        out.append(current)
    return out


def gpu_hours_lost_by_rule(*, gpu_ids, start: dt.datetime, end: dt.datetime) -> dict[str, float]:
    """The GPU-hours lost by jobs that tickets on these GPUs, opened in [start, end), interrupted:
    {ticket rule: hours}. One query."""
    rows = Job.objects.filter(
        interrupted=True, interrupted_by__gpu_id__in=list(gpu_ids), interrupted_by__first_seen__gte=start,
        interrupted_by__first_seen__lt=end,
    ).values_list("interrupted_by__rule", "gpu_hours_lost")  # fmt: skip
    out: dict[str, float] = defaultdict(float)
    for rule, lost in rows:
        out[rule] += lost
    return dict(out)


def gpu_interrupted_jobs(*, gpu_id: int) -> list[dict]:
    """The jobs this GPU's faults interrupted (the RMA pack): oldest first. One query."""
    rows = Job.objects.filter(interrupted=True, interrupted_by__gpu_id=gpu_id).order_by("interrupted_by__first_seen")
    return [
        {"job": key, "user": user, "ticket": ticket_id, "at": at, "gpu_hours_lost": round(lost, 4)}
        for key, user, ticket_id, at, lost in rows.values_list(
            "key", "user", "interrupted_by_id", "interrupted_by__first_seen", "gpu_hours_lost"
        )
    ]


# --- what the older apps above read of jobs (reports' usage report, no imports of
# jobs' models). Querysets, so the caller keeps its own filters, annotations and query count;
# SPAN_GAP is imported above.


def jobs() -> QuerySet[Job]:
    return Job.objects.all()


def spans() -> QuerySet[JobSpan]:
    return JobSpan.objects.all()
