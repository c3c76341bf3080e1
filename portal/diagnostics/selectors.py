"""Functions that read diagnostics (query shape lives here)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Exists, OuterRef, Prefetch, QuerySet, Subquery

from portal.core.errors import NotFound
from portal.diagnostics.models import Diagnostic, DiagnosticGpu, DiagnosticTest
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import GpuStatus

if TYPE_CHECKING:  # types in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu, Host


def _with_results(queryset):
    return queryset.select_related("host", "requested_by").prefetch_related(
        Prefetch(
            "gpus",
            queryset=DiagnosticGpu.objects.select_related("gpu").prefetch_related(
                Prefetch("tests", queryset=DiagnosticTest.objects.order_by("position"))
            ),
        )
    )


def diagnostic_get(*, diagnostic_id) -> Diagnostic:
    diagnostic = _with_results(Diagnostic.objects.filter(pk=diagnostic_id)).first()
    if diagnostic is None:
        raise NotFound("no such diagnostic", field_errors={"id": "No diagnostic with this id."})
    return diagnostic


def host_get(*, hostname: str) -> Host:
    host = fleet_selectors.hosts().filter(hostname=hostname).first()
    if host is None:
        raise NotFound(f"no host {hostname}", field_errors={"hostname": "No host with this name."})
    return host


def gpu_get(*, uuid: str) -> Gpu:
    gpu = fleet_selectors.gpus().select_related("host").filter(uuid=uuid).first()
    if gpu is None:
        raise NotFound(f"no GPU {uuid}", field_errors={"uuid": "No GPU with this uuid."})
    return gpu


def gpu_diagnostics(*, gpu: Gpu, limit: int | None = None) -> list[Diagnostic]:
    """The GPU's diagnostics, newest first, each with its results (every GPU of the run)."""
    queryset = _with_results(Diagnostic.objects.filter(gpus__gpu=gpu).order_by("-requested_at"))
    return list(queryset[:limit] if limit else queryset)


def host_diagnostics(*, host: Host, limit: int = 20) -> list[Diagnostic]:
    return list(_with_results(Diagnostic.objects.filter(host=host).order_by("-requested_at"))[:limit])


def latest_by_gpu(*, gpu_ids) -> dict[int, dict]:
    """Each GPU's latest diagnostic and latest burn-in, in one query:
    {gpu id: {"latest": DiagnosticGpu, "burn_in": DiagnosticGpu | None}}."""
    rows = (
        DiagnosticGpu.objects.filter(gpu_id__in=list(gpu_ids))
        .select_related("diagnostic")
        .order_by("gpu_id", "-diagnostic__requested_at")
    )
    found: dict[int, dict] = {}
    for row in rows:
        entry = found.setdefault(row.gpu_id, {"latest": row, "burn_in": None})
        if entry["burn_in"] is None and row.diagnostic.purpose == Diagnostic.Purpose.BURN_IN:
            entry["burn_in"] = row
    return found


def burn_in_word(row: DiagnosticGpu | None) -> str:
    """pending / passed / failed / expired for a GPU's burn-in row; "" without one."""
    if row is None:
        return ""
    state = row.diagnostic.state
    if state in Diagnostic.OPEN_STATES:
        return "pending"
    if state == Diagnostic.State.EXPIRED:
        return "expired"
    return "passed" if row.result in DiagnosticGpu.PASSING else "failed"


def burn_in_waiting(*, host_id: int | None = None) -> QuerySet[Gpu]:
    """GPUs in service or out for repair whose latest burn-in has not passed: no diagnostic of its
    level or higher, requested since it was, passed on them (one query; the whole fleet's when
    `host_id` is None). A burn-in that failed or expired still waits: the GPU has no proof yet."""
    latest = DiagnosticGpu.objects.filter(gpu=OuterRef("pk"), diagnostic__purpose=Diagnostic.Purpose.BURN_IN).order_by(
        "-diagnostic__requested_at"
    )
    passed = DiagnosticGpu.objects.filter(
        gpu=OuterRef("pk"), result__in=DiagnosticGpu.PASSING,
        diagnostic__requested_at__gte=OuterRef("burn_in_at"), diagnostic__level__gte=OuterRef("burn_in_level"),
    )  # fmt: skip
    gpus = fleet_selectors.gpus().filter(status__in=(GpuStatus.IN_SERVICE, GpuStatus.OUT_FOR_REPAIR))
    if host_id is not None:
        gpus = gpus.filter(host_id=host_id)
    return (
        gpus.annotate(
            burn_in_at=Subquery(latest.values("diagnostic__requested_at")[:1]),
            burn_in_level=Subquery(latest.values("diagnostic__level")[:1]),
        )
        .filter(burn_in_at__isnull=False)
        .exclude(Exists(passed))
        .order_by("host_id", "index")
    )


# The vocabularies the apps above name (no imports of diagnostics' models).
Purpose = Diagnostic.Purpose
State = Diagnostic.State
Result = DiagnosticGpu.Result
OPEN_STATES, FINISHED_STATES = Diagnostic.OPEN_STATES, Diagnostic.FINISHED_STATES
PASSING = DiagnosticGpu.PASSING  # the results that pass a GPU
