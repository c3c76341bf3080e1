"""What inventory reads: stock, contracts in force, RMA cases (query shape lives here)."""

from __future__ import annotations

import datetime as dt
import statistics
from typing import TYPE_CHECKING

from django.db.models import Count, Exists, OuterRef, Prefetch, Q
from django.utils import timezone

from portal.fleet import selectors as fleet
from portal.inventory.models import Part, RmaCase, StockMovement, Warranty

if TYPE_CHECKING:
    from portal.fleet.models import Gpu, Host


def parts_list():
    return Part.objects.order_by("name")


def part_movements(*, part: Part, limit: int = 50) -> list[StockMovement]:
    return list(part.movements.select_related("record__host", "record__gpu", "by").order_by("-at", "-id")[:limit])


def movements_recent(*, limit: int = 30) -> list[StockMovement]:
    # the record by its kind, host and GPU (never its id), in the same query
    movements = StockMovement.objects.select_related("part", "record__host", "record__gpu", "by")
    return list(movements.order_by("-at", "-id")[:limit])


def warranties_list():
    return Warranty.objects.prefetch_related(
        Prefetch("hosts", queryset=fleet.hosts().only("hostname").order_by("hostname")),
        Prefetch("gpus", queryset=fleet.gpus().only("uuid", "serial", "index").order_by("uuid")),
    ).order_by("ends_on", "vendor", "contract")


def gpu_warranty(*, gpu: Gpu, on: dt.date | None = None) -> Warranty | None:
    """The contract covering the GPU (itself or its host) on `on` (today), the one ending last. One query."""
    on = on or timezone.localdate()
    return (
        Warranty.objects.filter(Q(gpus=gpu) | Q(hosts=gpu.host_id), starts_on__lte=on, ends_on__gte=on)
        .order_by("-ends_on", "-id")
        .first()
    )


def gpu_warranty_briefs(*, gpus: list[Gpu]) -> dict[int, dict]:
    """fleet.hooks.gpu_warranties: the API's `warranty` of each GPU (the contract in force today
    naming it or its host, the one ending last, as gpu_warranty chooses). Two queries."""
    on = timezone.localdate()
    in_force = {"warranty__starts_on__lte": on, "warranty__ends_on__gte": on}
    by_gpu: dict[int, list[Warranty]] = {}
    by_host: dict[int, list[Warranty]] = {}
    for row in Warranty.gpus.through.objects.filter(gpu_id__in=[g.pk for g in gpus], **in_force).select_related(
        "warranty"
    ):
        by_gpu.setdefault(row.gpu_id, []).append(row.warranty)
    for row in Warranty.hosts.through.objects.filter(host_id__in={g.host_id for g in gpus}, **in_force).select_related(
        "warranty"
    ):
        by_host.setdefault(row.host_id, []).append(row.warranty)
    found = {}
    for gpu in gpus:
        candidates = by_gpu.get(gpu.pk, []) + by_host.get(gpu.host_id, [])
        if candidates:
            w = max(candidates, key=lambda w: (w.ends_on, w.pk))
            found[gpu.pk] = {"vendor": w.vendor, "contract": w.contract, "coverage": w.coverage, "ends_on": w.ends_on}
    return found


def host_coverage(*, host: Host, gpus: list[Gpu], on: dt.date | None = None) -> dict:
    """The contracts in force on a host and its GPUs (each marked `whole_host` when it names the
    host), and the GPUs none covers. One query, two when GPU contracts are in force without a host one."""
    on = on or timezone.localdate()
    gpu_ids = [gpu.pk for gpu in gpus]
    names_host = Warranty.hosts.through.objects.filter(warranty_id=OuterRef("pk"), host_id=host.pk)
    contracts = list(
        Warranty.objects.filter(Q(hosts=host) | Q(gpus__in=gpu_ids), starts_on__lte=on, ends_on__gte=on)
        .annotate(whole_host=Exists(names_host))
        .distinct()
        .order_by("ends_on", "id")
    )
    if not contracts or any(warranty.whole_host for warranty in contracts):
        uncovered = [] if contracts else [gpu for gpu in gpus if gpu.status != fleet.GpuStatus.RETIRED]
        return {"contracts": contracts, "uncovered": uncovered, "on": on}
    covered_ids = set(
        Warranty.gpus.through.objects.filter(warranty_id__in=[w.pk for w in contracts], gpu_id__in=gpu_ids).values_list(
            "gpu_id", flat=True
        )
    )
    uncovered = [gpu for gpu in gpus if gpu.pk not in covered_ids and gpu.status != fleet.GpuStatus.RETIRED]
    return {"contracts": contracts, "uncovered": uncovered, "on": on}


def rma_cases(*, gpu: str | None = None, state: str | None = None, vendor: str | None = None):
    cases = RmaCase.objects.select_related("gpu", "gpu__host", "replacement_gpu", "ticket")
    if gpu:
        cases = cases.filter(gpu__uuid=gpu)
    if state:
        cases = cases.filter(state=state)
    if vendor:
        cases = cases.filter(vendor__iexact=vendor)
    return cases.order_by("-opened_at", "-id")


def gpu_rma_cases(*, gpu: Gpu) -> list[RmaCase]:
    return list(rma_cases().filter(gpu=gpu).order_by("opened_at", "id"))


def rma_by_vendor(
    *, start: dt.datetime, end: dt.datetime, host: str | None = None, model: str | None = None
) -> list[dict]:
    """Per vendor, the cases opened in [start, end) (of the report's host and model when it names
    them): how many, how many closed and rejected by now, and the median turnaround (opened to
    replacement received) of those received. Two queries."""
    cases = RmaCase.objects.filter(opened_at__gte=start, opened_at__lt=end)
    if host:
        cases = cases.filter(gpu__host__hostname=host)
    if model:
        cases = cases.filter(gpu__model_name=model)
    counts = cases.values("vendor").annotate(
        opened=Count("id"),
        closed=Count("id", filter=Q(state=RmaCase.State.CLOSED)),
        rejected=Count("id", filter=Q(state=RmaCase.State.REJECTED)),
    )
    turnarounds: dict[str, list[float]] = {}
    for vendor, opened_at, received_at in cases.filter(received_at__isnull=False).values_list(
        "vendor", "opened_at", "received_at"
    ):
        turnarounds.setdefault(vendor, []).append((received_at - opened_at).total_seconds() / 86400)
    rows = []
    for row in counts.order_by("vendor"):
        days = turnarounds.get(row["vendor"])
        rows.append({**row, "median_turnaround_days": round(statistics.median(days), 1) if days else None})
    return rows
