"""What the jobs app decides after the span stage, run by beat (tasks.py), never on ingest's path:

- `job_interruptions_assess`: the jobs a critical hardware ticket interrupted and the GPU-hours they
  lost (portal-api-v1.md, "Jobs on GPUs");
- `jobs_idle_flag`: an "Idle allocation" ticket once per idle job;
- `jobs_slurm_lookup`: user, name and account of Slurm jobs, asked once per job through the
  scheduler's adapter (`scontrol show job` while it runs, `sacct` after, or slurmrestd).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from django.db import transaction
from django.utils import timezone

from portal.jobs import messages
from portal.jobs.models import SPAN_GAP, Job, JobSpan
from portal.jobs.selectors import HARDWARE_RULES, INTERRUPT_WITHIN, ran_at
from portal.jobs.spans import span_idle
from portal.maintenance import selectors as maintenance
from portal.maintenance.services.tickets import ticket_fire
from portal.scheduler.adapters import SchedulerUnavailable
from portal.scheduler.services import scheduler_adapter, scheduler_enabled

if TYPE_CHECKING:
    from portal.maintenance.models import Ticket

log = logging.getLogger(__name__)

ASSESS_LOOKBACK = dt.timedelta(days=8)  # the ingest window (7 days) and a day: late readings settle
LOOKUP_TRIES = 5  # Slurm asked this many times (one per beat run) before the portal gives up on a job
LOOKUP_BATCH = 50


def _hours(start: dt.datetime, end: dt.datetime) -> float:
    return max(0.0, (end - start).total_seconds() / 3600.0)


def job_interruptions_assess(*, now: dt.datetime | None = None) -> int:
    """Mark the jobs interrupted by the critical hardware tickets opened in the last
    ASSESS_LOOKBACK (and at least INTERRUPT_WITHIN + SPAN_GAP ago, so that whether the job left is
    known): the ticket opened on one of its GPUs while it ran, and it left that GPU within
    INTERRUPT_WITHIN after. Its GPU-hours lost: its GPU-hours, over all its GPUs, from its start to
    the (earliest such) ticket. Idempotent; returns the jobs marked."""
    now = now or timezone.now()
    tickets = list(
        maintenance.tickets().filter(
            rule__in=HARDWARE_RULES, severity=maintenance.Severity.CRITICAL, gpu__isnull=False,
            first_seen__gte=now - ASSESS_LOOKBACK, first_seen__lte=now - INTERRUPT_WITHIN - SPAN_GAP,
        ).order_by("first_seen", "id")
    )  # fmt: skip
    if not tickets:
        return 0
    near = JobSpan.objects.filter(
        gpu_id__in={t.gpu_id for t in tickets}, started_at__lte=tickets[-1].first_seen,
        ended_at__gte=tickets[0].first_seen - INTERRUPT_WITHIN,
    )  # fmt: skip
    hit: dict[int, Ticket] = {}
    for span in near:
        for ticket in tickets:  # the earliest ticket that interrupted it on this GPU
            if (span.gpu_id == ticket.gpu_id and ran_at(span, ticket.first_seen)
                    and span.ended_at <= ticket.first_seen + INTERRUPT_WITHIN):  # fmt: skip
                if span.job_id not in hit or ticket.first_seen < hit[span.job_id].first_seen:
                    hit[span.job_id] = ticket
                break
    if not hit:
        return 0
    spans: dict[int, list[JobSpan]] = defaultdict(list)
    for span in JobSpan.objects.filter(job_id__in=list(hit)):
        spans[span.job_id].append(span)
    with transaction.atomic():
        for job_id, ticket in hit.items():
            at = ticket.first_seen
            for span in spans[job_id]:
                span.gpu_hours_lost = _hours(span.started_at, min(span.ended_at, at))
                span.interrupted_by = ticket if span.gpu_id == ticket.gpu_id and ran_at(span, at) else None
            JobSpan.objects.bulk_update(spans[job_id], ["gpu_hours_lost", "interrupted_by"])
            lost = sum(span.gpu_hours_lost for span in spans[job_id])
            Job.objects.filter(pk=job_id).update(interrupted=True, interrupted_by=ticket, gpu_hours_lost=lost)
    return len(hit)


def jobs_idle_flag(*, now: dt.datetime | None = None) -> int:
    """An info ticket "Idle allocation" on the GPU of each idle job not yet flagged, naming the job
    and its user: once per job (the job row is claimed with a conditional UPDATE first)."""
    now = now or timezone.now()
    flagged = 0
    for job in Job.objects.filter(idle=True, idle_flagged=False).order_by("pk")[:200]:
        with transaction.atomic():  # the claim and the ticket together: a failure leaves the job to the next run
            if not Job.objects.filter(pk=job.pk, idle_flagged=False).update(idle_flagged=True):
                continue  # another worker took it
            span = next((s for s in job.spans.select_related("gpu").order_by("started_at") if span_idle(s)), None)
            if span is None:
                continue
            note = messages.IDLE_NOTE(
                job=job.key, user=job.user or "?", hours=f"{span.gpu_hours:.1f}",
                utilization=f"{span.utilization_gpu_mean_pct:.1f}",
            )  # fmt: skip
            ticket, _ = ticket_fire(
                rule="idle_allocation", host_id=span.gpu.host_id, gpu_id=span.gpu_id, at=min(now, span.ended_at),
                value=span.utilization_gpu_mean_pct, note=note,
            )  # fmt: skip
            Job.objects.filter(pk=job.pk).update(idle_ticket=ticket)
        flagged += 1
    return flagged


def jobs_slurm_lookup(*, now: dt.datetime | None = None, limit: int = LOOKUP_BATCH) -> int:
    """User, name and account of Slurm jobs not looked up yet, asked once per job (cached in the
    job's row). A job Slurm no longer knows, or answers about with an error, counts a try (the
    adapter's None; given up after LOOKUP_TRIES), so it never holds up the jobs queued behind it;
    Slurm silent (SchedulerSilent) or the portal's setup refused (the rest adapter's token), any
    SchedulerUnavailable: the pass stops, nothing changes, the next run asks again. Returns the
    jobs answered."""
    if not scheduler_enabled():
        return 0
    now = now or timezone.now()
    adapter = scheduler_adapter()
    answered = 0
    pending = Job.objects.filter(lookup=Job.Lookup.PENDING, scheduler=Job.Scheduler.SLURM).order_by("pk")[:limit]
    for job in pending:
        raw_id = job.key.split(":", 1)[1]
        if not raw_id.isdigit():
            Job.objects.filter(pk=job.pk).update(lookup=Job.Lookup.GAVE_UP, lookup_at=now)
            continue
        try:
            info = adapter.job_info(int(raw_id))
        except SchedulerUnavailable as error:
            log.warning("jobs: Slurm did not answer for %s (%s); asked again next time", job.key, error)
            return answered
        if info is None:
            tries = job.lookup_tries + 1
            state = Job.Lookup.GAVE_UP if tries >= LOOKUP_TRIES else Job.Lookup.PENDING
            Job.objects.filter(pk=job.pk).update(lookup_tries=tries, lookup=state, lookup_at=now)
            continue
        Job.objects.filter(pk=job.pk).update(
            user=info.user[:128] or None, name=info.name[:200] or None, account=info.account[:128] or None,
            lookup=Job.Lookup.DONE, lookup_at=now,
        )  # fmt: skip
        answered += 1
    return answered
