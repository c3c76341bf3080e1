"""`GET /api/v1/reports/reliability` (JSON, CSV or PDF) and `GET /api/v1/reports/usage` (JSON or CSV),
as portal-api-v1.md defines them."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from django.http import JsonResponse
from django.utils import timezone
from ninja import Field, Query, Router, Schema
from pydantic import AfterValidator

import portal.core.converters  # noqa: F401 - registers {segment:…}
from portal.core.api import ApiDateTime, ErrorOut, require_perm
from portal.core.errors import NotFound
from portal.core.exports import attachment
from portal.fleet import selectors as fleet_selectors
from portal.reports.exports import report_csv, report_pdf, usage_csv
from portal.reports.rma import rma_evidence
from portal.reports.selectors import ReportQuery, host_problem, reliability_report
from portal.reports.usage import UsageQuery, usage_report

router = Router(tags=["reports"])
REPORT_PERMISSION = "fleet.view_maintenancerecord"


def _host_name(host: str | None) -> str | None:
    if (problem := host_problem(host or None)) is not None:
        raise ValueError(problem)
    return host or None


class ReliabilityParams(Schema):
    start: ApiDateTime = Field(alias="from", description="RFC 3339 with a zone.")
    end: ApiDateTime = Field(alias="to", description="RFC 3339 with a zone.")
    host: Annotated[str | None, AfterValidator(_host_name)] = Field(
        None, max_length=253, description="Hostname, exact."
    )
    model: str | None = Field(None, max_length=128, description="Model name, exact.")
    format: str = Field("json", pattern="^(json|csv|pdf)$")


class Measures(Schema):
    """What the report measures over the period, for one GPU, one model or the fleet."""

    service_hours: float
    repairs: int
    downtime_hours: float
    cost: float
    mtbf_hours: float | None
    mttr_hours: float | None
    availability: float | None


class GpuRow(Measures):
    uuid: str
    hostname: str
    index: int
    model: str
    serial: str
    hardware_tickets: int


class ModelRow(Measures):
    model: str
    gpus: int


class FleetRow(Measures):
    gpus: int


class RepeatOffender(Schema):
    uuid: str
    hostname: str
    index: int
    serial: str
    reasons: list[str]


class PublishedRate(Schema):
    source: str = Field(description="The `key` of a study in `published_studies`.")
    label: str
    per_gpu_year: float


class CategoryRate(Schema):
    category: str = Field(description="hardware_xid, memory, interconnect, thermal, other; or all.")
    failures: int
    per_gpu_year: float | None = Field(description="Failures per GPU-year of service in the period.")
    published: list[PublishedRate]


class FailureRates(Schema):
    gpu_years: float
    categories: list[CategoryRate]
    all: CategoryRate


class LemonGpu(Schema):
    uuid: str
    hostname: str
    index: int
    serial: str
    failures: int
    per_gpu_year: float | None
    reasons: list[str]


class LemonHost(Schema):
    hostname: str
    gpus: int
    failures: int
    per_gpu_year: float | None
    reasons: list[str]


class Lemons(Schema):
    gpus: list[LemonGpu]
    hosts: list[LemonHost]


class PublishedStudy(Schema):
    key: str
    label: str
    citation: str
    url: str
    summary: str
    gpus: int | None
    days: float | None


class RmaVendorRow(Schema):
    vendor: str
    opened: int
    closed: int
    rejected: int
    median_turnaround_days: float | None


class ReliabilityOut(Schema):
    start: str = Field(alias="from")
    end: str = Field(alias="to")
    host: str | None = None
    model: str | None = None
    gpus: list[GpuRow]
    models: list[ModelRow]
    fleet: FleetRow
    repeat_offenders: list[RepeatOffender] = []
    failure_rates: FailureRates
    lemons: Lemons
    published_studies: list[PublishedStudy]
    rma: list[RmaVendorRow] = Field([], description="RMA cases opened in the period, per vendor (inventory).")


def _filename(query: ReportQuery, extension: str) -> str:
    return f"reliability-{query.start:%Y%m%d}-{query.end:%Y%m%d}.{extension}"


@router.get(
    "/reports/reliability",
    response={200: ReliabilityOut, 400: ErrorOut, 403: ErrorOut},
    by_alias=True,
    openapi_extra={
        "responses": {
            200: {
                "description": "The report (JSON; `format=csv`: text/csv; `format=pdf`: application/pdf)",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ReliabilityOut"}},
                    "text/csv": {"schema": {"type": "string"}},
                    "application/pdf": {"schema": {"type": "string", "format": "binary"}},
                },
            }
        }
    },
)
def reliability(request, params: Query[ReliabilityParams]):
    """Every GPU matching the filters whose start (install date, else registration) is before `to` and
    that was not retired before `from`, with
    service hours, repairs, downtime, cost, MTBF, MTTR, availability and hardware tickets; per model
    and for the fleet. Periods are half-open (`from <= t < to`)."""
    require_perm(request, REPORT_PERMISSION)
    query = ReportQuery(start=params.start, end=params.end, host=params.host, model=params.model or None)
    if params.format == "json":
        # Built to the schema by as_json (tests hold it to ReliabilityOut); answered as is, without
        # validating 1,000 rows a second time.
        return JsonResponse(reliability_report(query).as_json())
    report = reliability_report(query)
    if params.format == "csv":
        return attachment(report_csv(report), content_type="text/csv; charset=utf-8", filename=_filename(query, "csv"))
    pdf = report_pdf(report, generated_by=request.user.get_username(), generated_at=timezone.now())
    return attachment(pdf, content_type="application/pdf", filename=_filename(query, "pdf"))


@router.get("/gpus/{segment:uuid}/rma-pack", response={200: dict, 403: ErrorOut, 404: ErrorOut}, tags=["gpus"])
def rma_pack(request, uuid: str):
    """The GPU's RMA evidence pack as JSON: the same content as its PDF (serial, driver history, XID
    timeline, ECC and PCIe trends, repairs, diagnostics, status history, checklists, RMA cases)."""
    require_perm(request, REPORT_PERMISSION)
    gpu = fleet_selectors.gpus().select_related("host").filter(uuid=uuid).first()
    if gpu is None:
        raise NotFound(f"no GPU {uuid}", field_errors={"uuid": "No GPU with this uuid."})
    return JsonResponse(rma_evidence(gpu=gpu, now=timezone.now()))


# --- the usage report ------------------------------------------------------------------------------


class UsageParams(Schema):
    start: ApiDateTime = Field(alias="from", description="RFC 3339 with a zone.")
    end: ApiDateTime = Field(alias="to", description="RFC 3339 with a zone; at most 731 days after `from`.")
    host: Annotated[str | None, AfterValidator(_host_name)] = Field(
        None, max_length=253, description="Hostname, exact."
    )
    model: str | None = Field(None, max_length=128, description="Model name, exact.")
    format: str | None = Field(None, pattern="^(json|csv)$", description="Else by the Accept header.")


class UsagePeriod(Schema):
    start: str = Field(alias="from")
    end: str = Field(alias="to")


class UsageFleet(Schema):
    gpus: int
    gpu_hours_available: float
    gpu_hours_busy: float
    busy_pct: float | None
    energy_kwh: float | None
    gpu_hours_lost: float


class UsageFigures(Schema):
    jobs: int
    gpu_hours: float
    utilization_gpu_mean_pct: float | None
    idle_gpu_hours: float
    energy_kwh: float | None
    interrupted_jobs: int
    gpu_hours_lost: float


class UsageUser(UsageFigures):
    user: str | None


class UsageAccount(UsageFigures):
    account: str | None


class UsageModel(Schema):
    model: str
    gpus: int
    gpu_hours_busy: float
    energy_kwh_per_gpu_hour: float | None
    failures_per_gpu_year: float | None


class UsageDay(Schema):
    day: dt.date
    gpu_hours_available: float
    gpu_hours_busy: float
    busy_pct: float | None


class UsageFlatOut(Schema):
    gpu: str
    host: str
    index: int
    model: str
    started_at: dt.datetime
    ended_at: dt.datetime
    hours: float
    jobs: list[str]
    users: list[str]


class UsageOut(Schema):
    period: UsagePeriod
    fleet: UsageFleet
    users: list[UsageUser]
    accounts: list[UsageAccount]
    models: list[UsageModel]
    days: list[UsageDay] = Field(description="Busy share per UTC day (beyond the contract's fields: the page's chart).")
    flat_out: list[UsageFlatOut] = Field(
        description="GPUs that ran flat out longer than the rest policy in the period."
    )


def _wants_csv(request, params: UsageParams) -> bool:
    if params.format is not None:
        return params.format == "csv"
    accept = request.headers.get("Accept", "")
    return "text/csv" in accept and "application/json" not in accept


@router.get(
    "/reports/usage",
    response={200: UsageOut, 400: ErrorOut, 403: ErrorOut},
    by_alias=True,
    openapi_extra={
        "responses": {
            200: {
                "description": "The report (JSON; `Accept: text/csv` or `format=csv`: text/csv)",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/UsageOut"}},
                    "text/csv": {"schema": {"type": "string"}},
                },
            }
        }
    },
)
def usage(request, params: Query[UsageParams]):
    """What the GPUs did for whom in the period: the fleet's busy share, GPU-hours, idle GPU-hours,
    energy and GPU-hours lost to faults per user and per account, and per GPU model its busy hours,
    energy per GPU-hour and failures per GPU-year. Periods are half-open (`from <= t < to`)."""
    require_perm(request, REPORT_PERMISSION)
    query = UsageQuery(start=params.start, end=params.end, host=params.host, model=params.model or None)
    report = usage_report(query)
    if _wants_csv(request, params):
        filename = f"usage-{query.start:%Y%m%d}-{query.end:%Y%m%d}.csv"
        return attachment(usage_csv(report), content_type="text/csv; charset=utf-8", filename=filename)
    return JsonResponse(report.as_json())
