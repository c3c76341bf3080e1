"""Jobs on GPUs (portal-api-v1.md, "Jobs on GPUs"): a GPU's jobs, the job list, one job. Thin."""

from __future__ import annotations

import datetime as dt

import orjson
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Field, Query, Router, Schema

from portal.core.api import ApiDateTime, ErrorOut, require_perm
from portal.core.errors import InvalidInput
from portal.fleet import selectors as fleet
from portal.jobs import selectors
from portal.jobs.figures import job_out, span_out

router = Router(tags=["jobs"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut}


class JobPeriod(Schema):
    start: ApiDateTime | None = Field(None, alias="from", description="RFC 3339; spans ending before it are left out.")
    end: ApiDateTime | None = Field(None, alias="to", description="RFC 3339; spans starting after it are left out.")


class GpuJobFilters(JobPeriod):
    user: str = Field("", max_length=128, description="Only this user's jobs.")
    host: str = Field("", max_length=253, description="Only jobs that held a GPU of this host.")
    interrupted: bool | None = Field(None, description="true: only jobs a hardware fault interrupted.")
    idle: bool | None = Field(None, description="true: only jobs that held a GPU ≥ 1 h under 5 % utilisation.")
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=10**9)


class JobSpanOut(Schema):
    job: str
    gpu: str
    host: str
    started_at: dt.datetime
    ended_at: dt.datetime
    running: bool
    gpu_hours: float
    energy_kwh: float | None
    utilization_gpu_mean_pct: float | None
    memory_used_max_mib: int | None
    temperature_max_c: int | None
    throttled_pct: float | None


class GpuJobTicketOut(Schema):
    id: int
    title: str
    severity: str
    gpu: str
    opened_at: dt.datetime


class GpuJobOut(Schema):
    job: str
    scheduler: str
    user: str | None
    name: str | None
    account: str | None
    started_at: dt.datetime
    ended_at: dt.datetime
    running: bool
    gpus: list[JobSpanOut]
    gpu_hours: float
    energy_kwh: float | None
    utilization_gpu_mean_pct: float | None
    idle: bool
    tickets: list[GpuJobTicketOut]
    interrupted: bool
    gpu_hours_lost: float


def _period_checked(query: JobPeriod) -> None:
    if query.start and query.end and query.start > query.end:
        raise InvalidInput("'from' is later than 'to'", problems=[("from", "later than 'to'")])


@router.get("/gpus/{uuid}/jobs", response={200: list[JobSpanOut], **ERRORS})
def gpu_jobs(request, uuid: str, query: Query[JobPeriod]):
    """The GPU's job spans overlapping [from, to], newest first."""
    require_perm(request, "fleet.view_gpu")
    _period_checked(query)
    gpu = get_object_or_404(fleet.gpus().only("pk"), uuid=uuid)
    return [span_out(span) for span in selectors.gpu_spans(gpu_id=gpu.pk, start=query.start, end=query.end)]


@router.get("/jobs", response={200: list[GpuJobOut], **ERRORS})
def jobs_list(request, filters: Query[GpuJobFilters]):
    """Jobs overlapping [from, to], newest first; filters `user`, `host`, `interrupted`, `idle`."""
    require_perm(request, "fleet.view_gpu")
    _period_checked(filters)
    jobs = selectors.job_list(
        start=filters.start, end=filters.end, user=filters.user, host=filters.host, interrupted=filters.interrupted,
        idle=filters.idle,
    )  # fmt: skip
    page = list(jobs[filters.offset : filters.offset + filters.limit])
    return _json([job_out(detail) for detail in selectors.jobs_rows(page)])


@router.get("/jobs/{path:key}", response={200: GpuJobOut, **ERRORS})
def job_get(request, key: str):
    """One job by its key (URL-encoded: `slurm%3A4242`, `k8s%3Alab%2Ftrain-0`); 404 for a job never seen."""
    require_perm(request, "fleet.view_gpu")
    (detail,) = selectors.jobs_rows([selectors.job_get(key=key)])
    return _json(job_out(detail))


def _json(body) -> HttpResponse:
    """The answer as the schema above describes it, built by figures.py and written by orjson: a
    page of jobs holds hundreds of spans, which the schema's validation would check field by field
    (most of the request's time)."""
    return HttpResponse(orjson.dumps(body, option=orjson.OPT_UTC_Z), content_type="application/json")
