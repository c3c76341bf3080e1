"""A card swapped in a slot: the service that records a swap, what reads the slots' history, and
what it hands on (`fleet.hooks.gpu_swapped`).

Ingest (telemetry) decides when a GPU registered just now takes the slot of one that left for
repair (it knows when each GPU last reported) and calls `gpu_swap_record`; the swap retires the
old GPU ("Replaced by <serial>."), links old, new and the repair record (GpuSwap), and marks the
repair's outcome "replaced" when it was still pending. The new GPU is registered like any new
GPU (fleet.services.gpu_create), so whatever greets a new GPU (a burn-in) greets it too.

Once the swap has committed, `fleet.hooks.gpu_swapped` hands it on (maintenance resolves the old
GPU's "Agent silent" tickets).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from django.db import transaction
from django.db.models import Q

from portal.core.errors import InvalidInput
from portal.fleet import hooks, services
from portal.fleet.models import Gpu, GpuStatusChange, GpuSwap, Host, MaintenanceRecord

log = logging.getLogger(__name__)

# The GPUs a new card may replace: those not retired (a retired GPU has left its slot already).
REPLACEABLE = (Gpu.Status.IN_SERVICE, Gpu.Status.OUT_FOR_REPAIR)


def swap_reason(*, new_gpu: Gpu) -> str:
    """The old GPU's retirement reason (English, like every status-change reason)."""
    return f"Replaced by {new_gpu.serial or new_gpu.uuid}."


def swap_candidates(*, host: Host, pci_bus_id: str, exclude_uuids) -> list[tuple[Gpu, MaintenanceRecord | None]]:
    """The host's GPUs at this PCI bus id that a new card there may have replaced (not retired, not
    in `exclude_uuids`: the GPUs the agent reports now), newest first, each with its latest repair
    record. Whether one left its slot (out for repair, or silent since that record) is the
    caller's to judge: it knows when each GPU last reported."""
    if not pci_bus_id:
        return []
    gpus = list(
        Gpu.objects.filter(host=host, pci_bus_id=pci_bus_id, status__in=REPLACEABLE)
        .exclude(uuid__in=list(exclude_uuids))
        .order_by("-created_at", "-id")
    )
    if not gpus:
        return []
    repairs: dict[int, MaintenanceRecord] = {}
    for record in MaintenanceRecord.objects.filter(gpu__in=gpus, kind=MaintenanceRecord.Kind.REPAIR).order_by(
        "performed_at", "id"
    ):
        repairs[record.gpu_id] = record  # the latest wins
    return [(gpu, repairs.get(gpu.pk)) for gpu in gpus]


@transaction.atomic
def gpu_swap_record(*, old_gpu: Gpu, new_gpu: Gpu, repair: MaintenanceRecord | None, at: dt.datetime) -> GpuSwap | None:
    """Record that `new_gpu` took `old_gpu`'s slot at `at`: retire the old GPU (source agent,
    reason "Replaced by <serial>."), keep the swap row, mark a pending repair as replaced. Returns
    None, changing nothing, when the old GPU was retired or swapped meanwhile (two batches at once:
    its row is locked, so exactly one of them swaps it) or the new GPU already replaced another."""
    if old_gpu.host_id != new_gpu.host_id or old_gpu.pk == new_gpu.pk:
        raise InvalidInput("not a swap", field_errors={"new_gpu": "Must be another GPU of the same host."})
    locked = Gpu.objects.select_for_update().only("status").get(pk=old_gpu.pk)
    if locked.status not in REPLACEABLE or GpuSwap.objects.filter(old_gpu=old_gpu).exists():
        return None
    if GpuSwap.objects.filter(new_gpu=new_gpu).exists():
        return None
    # Never before the old GPU's last status change (an agent's spool delivers old readings late),
    # so its status history stays in order.
    last_change = old_gpu.status_changes.order_by("-changed_at", "-id").values_list("changed_at", flat=True).first()
    at = max(at, last_change) if last_change is not None else at
    services.gpu_status_set(
        gpu=old_gpu, status=Gpu.Status.RETIRED, source=GpuStatusChange.Source.AGENT,
        reason=swap_reason(new_gpu=new_gpu), at=at,
    )  # fmt: skip
    swap = GpuSwap.objects.create(
        host_id=old_gpu.host_id, pci_bus_id=old_gpu.pci_bus_id, old_gpu=old_gpu, new_gpu=new_gpu, repair=repair,
        swapped_at=at,
    )  # fmt: skip
    if repair is not None and repair.outcome in ("", MaintenanceRecord.RepairOutcome.PENDING):
        try:
            with transaction.atomic():  # a record the rules now refuse stays as it is; the swap stands
                services.record_update(record=repair, outcome=MaintenanceRecord.RepairOutcome.REPLACED)
        except InvalidInput as error:
            log.warning("swap %s: repair record %s kept as it is: %s", swap.pk, repair.pk, error)
    services.host_inventory_changed(host_ids=[old_gpu.host_id])
    transaction.on_commit(lambda: hooks.gpu_swapped.call(swap=swap))
    return swap


@dataclasses.dataclass
class SlotStint:
    """One GPU's time in a slot: from its registration (or the swap that put it there) to the swap
    that took it out, or now."""

    gpu: Gpu
    since: dt.datetime
    until: dt.datetime | None
    swap_in: GpuSwap | None
    swap_out: GpuSwap | None


@dataclasses.dataclass
class Slot:
    pci_bus_id: str
    stints: list[SlotStint]

    @property
    def swaps(self) -> int:
        return sum(1 for stint in self.stints if stint.swap_out is not None)


def host_slot_history(*, host: Host, gpus: list[Gpu]) -> list[Slot]:
    """The host's slots (PCI bus ids) that have held more than one GPU, each with the GPUs that
    sat there, oldest first, and the swaps between them. `gpus`: every GPU of the host, as the
    page loaded them already; one query (the swaps) whatever the host's size."""
    gpus = sorted((gpu for gpu in gpus if gpu.pci_bus_id), key=lambda gpu: (gpu.pci_bus_id, gpu.created_at, gpu.pk))
    swaps = list(
        GpuSwap.objects.filter(host=host).select_related("repair", "old_gpu", "new_gpu").order_by("swapped_at", "id")
    )
    swap_in = {swap.new_gpu_id: swap for swap in swaps}
    swap_out = {swap.old_gpu_id: swap for swap in swaps}
    by_bus: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        by_bus.setdefault(gpu.pci_bus_id, []).append(gpu)
    slots = []
    for bus_id, slot_gpus in by_bus.items():
        if len(slot_gpus) < 2 and not any(gpu.pk in swap_in or gpu.pk in swap_out for gpu in slot_gpus):
            continue
        stints = []
        for gpu in slot_gpus:
            arrived, left = swap_in.get(gpu.pk), swap_out.get(gpu.pk)
            stints.append(
                SlotStint(
                    gpu=gpu, since=arrived.swapped_at if arrived else gpu.created_at,
                    until=left.swapped_at if left else None, swap_in=arrived, swap_out=left,
                )
            )  # fmt: skip
        stints.sort(key=lambda stint: (stint.since, stint.gpu.pk))
        slots.append(Slot(pci_bus_id=bus_id, stints=stints))
    return slots


def gpu_swaps(*, gpu: Gpu) -> dict:
    """The swap that put this GPU in its slot ("replaced": it replaced swap.old_gpu) and the one
    that took it out ("replaced_by": swap.new_gpu replaced it); None each when none. One query."""
    result: dict[str, GpuSwap | None] = {"replaced": None, "replaced_by": None}
    for swap in GpuSwap.objects.select_related("old_gpu", "new_gpu", "repair").filter(Q(old_gpu=gpu) | Q(new_gpu=gpu)):
        result["replaced" if swap.new_gpu_id == gpu.pk else "replaced_by"] = swap
    return result


def record_swaps(*, record: MaintenanceRecord) -> list[GpuSwap]:
    """The swaps that replaced the GPU of this repair record (at most one; none for other kinds)."""
    if record.kind != MaintenanceRecord.Kind.REPAIR:
        return []
    return list(GpuSwap.objects.filter(repair=record).select_related("old_gpu", "new_gpu"))
