"""A repair history worth reading for the demo fleet (`manage.py seed_repair_history`, run by
`manage.py demo` after `seed_demo`).

dgx-02 GPU 2 is a lemon: fell off the bus (XID 79), went out for repair, came back through a
repair-return checklist; fell off the bus again two months later (a hardware XID after a repair:
a repeat offender), repaired again and returned by an admin's override; a double-bit ECC error
(XID 48) since. Its first repair's cost was corrected afterwards by the admin (the audit trail
shows who recorded and who changed it). dgx-01 GPU 3 is out for repair now (PCIe link dropping to
x8), and ws-lab-03 GPU 0 was swapped for an exchange card last spring (the swap retired it).
Idempotent: does nothing once the lemon has its repairs.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from auditlog.context import set_actor
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.diagnostics import services as diagnostics_services
from portal.diagnostics.models import Diagnostic, DiagnosticGpu
from portal.fleet import services, swaps
from portal.fleet.models import Gpu, GpuStatusChange, MaintenanceRecord
from portal.maintenance import messages
from portal.maintenance.models import Ticket
from portal.telemetry.models import XidEvent

Source = GpuStatusChange.Source
REPAIR = MaintenanceRecord.Kind.REPAIR
FIRST_RMA = "RMA-2026-0188"


def _user(username: str):
    return get_user_model().objects.filter(username=username).first()


def _ticket(gpu: Gpu, *, rule: str, fingerprint: str, severity: str, at: dt.datetime, **fields) -> Ticket:
    """A ticket titled as the rule engine titles one: the rule's title and its GPU and host."""
    title = messages.TITLE(problem=rule, subject=messages.subject(host=gpu.host.hostname, gpu_index=gpu.index))
    return Ticket.objects.create(
        fingerprint=fingerprint, rule=rule, host=gpu.host, gpu=gpu, title=str(title)[:200], title_msg=title.stored(),
        severity=severity, first_seen=at, last_seen=at, **fields,
    )  # fmt: skip


def _xid(gpu: Gpu, at: dt.datetime, code: int, rule: str) -> Ticket:
    """An XID event and its ticket, resolved 30 h later."""
    XidEvent.objects.create(gpu=gpu, ts=at, code=code)
    return _ticket(
        gpu, rule=rule, fingerprint=f"{rule}/gpu/{gpu.pk}/{int(at.timestamp())}", severity="critical",
        at=at, state=Ticket.State.RESOLVED, resolved_at=at + dt.timedelta(hours=30),
        evidence={"readings": [[at.timestamp(), code]]}, peak_value=float(code),
    )  # fmt: skip


def _status(
    gpu: Gpu, status: str, *, user, at: dt.datetime, reason: str, source: str = Source.PORTAL, force: bool = False
) -> None:
    services.gpu_status_set(gpu=gpu, status=status, user=user, source=source, at=at, reason=reason, force=force)


def _diagnostic_passed(gpu: Gpu, *, at: dt.datetime) -> None:
    """A level-1 diagnostic that passed on the GPU at `at` (what lets it return to service)."""
    diagnostic = diagnostics_services.diagnostic_request(
        host=gpu.host, level=1, gpus=[gpu], purpose=Diagnostic.Purpose.RETURN, now=at
    )
    minutes = lambda n: at + dt.timedelta(minutes=n)  # noqa: E731
    Diagnostic.objects.filter(pk=diagnostic.pk).update(
        state=Diagnostic.State.PASSED, started_at=minutes(1), finished_at=minutes(2), result_at=minutes(2),
        tool="dcgmi", tool_version="3.3.9", driver_version=gpu.host.driver_version,
    )  # fmt: skip
    DiagnosticGpu.objects.filter(diagnostic=diagnostic).update(result=DiagnosticGpu.Result.PASS)


def _repair(gpu: Gpu, *, tech, performed_at: dt.datetime, **fields) -> MaintenanceRecord:
    """A repair record, logged by the technician (the audit trail's actor)."""
    with set_actor(tech):
        return services.record_create(
            kind=REPAIR, host=gpu.host, gpu=gpu, recorded_by=tech, performed_at=performed_at, **fields
        )


def _register_at_install(gpu: Gpu) -> None:
    """Demo GPUs were registered today; date their registration (and first status row) back to
    their install date, as if the portal had been there all along."""
    if gpu.install_date is None:
        return
    at = dt.datetime.combine(gpu.install_date, dt.time(9, 0), tzinfo=dt.UTC)
    Gpu.objects.filter(pk=gpu.pk).update(created_at=at)
    GpuStatusChange.objects.filter(gpu=gpu, from_status="").update(changed_at=at)
    gpu.created_at = at


@transaction.atomic
def repair_history_seed(*, now: dt.datetime | None = None) -> bool:
    now = now or timezone.now()
    lemon = Gpu.objects.filter(host__hostname="dgx-02", index=2).select_related("host").first()
    if lemon is None or MaintenanceRecord.objects.filter(gpu=lemon, kind=REPAIR).exists():
        return False
    admin, tech = _user("admin"), _user("tech")
    for gpu in Gpu.objects.filter(host__hostname__in=["dgx-01", "dgx-02", "ws-lab-03"]):
        _register_at_install(gpu)
    lemon.refresh_from_db()
    days = lambda n: now - dt.timedelta(days=n)  # noqa: E731

    hours = lambda n: dt.timedelta(hours=n)  # noqa: E731

    # First failure, repair, return through a repair-return checklist run.
    _xid(lemon, days(160), 79, "xid_bus")
    _status(lemon, "out_for_repair", user=tech, at=days(160) + hours(2),
            reason="XID 79: GPU fell off the bus; drained and pulled.")  # fmt: skip
    first = _repair(
        lemon, tech=tech, performed_at=days(154), performed_by="ACME GPU Service", vendor="ACME GPU Service",
        rma_number=FIRST_RMA, parts="PCIe riser, re-seated card", cost="120.00", downtime_hours="142",
        outcome="fixed", notes="Riser contacts oxidised; riser replaced, card re-seated, 24 h burn-in passed.",
    )  # fmt: skip
    _diagnostic_passed(lemon, at=days(154) + hours(1))
    _status(lemon, "in_service", user=tech, source=Source.CHECKLIST, at=days(154) + hours(3),
            reason="repair_return checklist passed (stress test 2 h).")  # fmt: skip
    with set_actor(admin):  # the vendor's invoice came in higher: the admin corrects the cost
        services.record_update(
            record=first, user=admin, cost=Decimal("640.00"), notes=first.notes + " Invoice: riser + labour 640.00."
        )

    # The same fault after the repair (a repeat offender), and a second repair.
    _xid(lemon, days(96), 79, "xid_bus")
    _status(lemon, "out_for_repair", user=tech, at=days(96) + hours(1),
            reason=f"XID 79 again, 2 months after {FIRST_RMA}.")  # fmt: skip
    _repair(
        lemon, tech=tech, performed_at=days(89), performed_by="NVIDIA RMA depot", vendor="NVIDIA",
        rma_number="RMA-2026-0311", parts="Board swap (same SKU)", cost="0", downtime_hours="166",
        outcome="replaced", notes="Under warranty: board replaced by the vendor.",
    )  # fmt: skip
    _status(lemon, "in_service", user=admin, at=days(89) + hours(2), force=True,
            reason="Vendor-tested board; no diagnostic run: admin override.")  # fmt: skip
    _xid(lemon, days(12), 48, "xid_ecc")
    Ticket.objects.filter(gpu=lemon, rule="xid_ecc").update(state=Ticket.State.OPEN, resolved_at=None)

    # A GPU out for repair right now, and a retired one.
    pcie = Gpu.objects.filter(host__hostname="dgx-01", index=3).first()
    if pcie is not None:
        _ticket(pcie, rule="pcie", fingerprint=f"pcie/gpu/{pcie.pk}", severity="warning",
                at=days(2))  # fmt: skip
        _status(pcie, "out_for_repair", user=tech, at=days(2) + hours(4),
                reason="PCIe link trains at x8 instead of x16; riser ordered.")  # fmt: skip
    old = Gpu.objects.filter(host__hostname="ws-lab-03", index=0).first()
    if old is not None:
        _swap(old, tech=tech, at=days(200))
    return True


def _swap(old: Gpu, *, tech, at: dt.datetime) -> None:
    """ws-lab-03 GPU 0 went out for repair; the vendor sent another card, and the agent reported it
    in the same slot: the swap retired the old one ("Replaced by <serial>.") and the host page's
    slot history shows both."""
    _status(old, "out_for_repair", user=tech, at=at - dt.timedelta(days=9),
            reason="Fan bearing grinding; artefacts under load.")  # fmt: skip
    repair = _repair(
        old, tech=tech, performed_at=at - dt.timedelta(days=8), performed_by="ACME GPU Service",
        vendor="ACME GPU Service", rma_number="RMA-2026-0107", parts="Card exchange", outcome="pending",
        notes="Card sent to the vendor; an exchange card is on its way.",
    )  # fmt: skip
    new = services.gpu_create(
        uuid="GPU-demo0200-5a5a-4000-8000-000002000099", serial="1650724099201", model_name=old.model_name,
        host=old.host, index=old.index, pci_bus_id=old.pci_bus_id, memory_total_mib=old.memory_total_mib,
        power_limit_default_w=old.power_limit_default_w, temp_slowdown_c=old.temp_slowdown_c,
        temp_shutdown_c=old.temp_shutdown_c, install_date=at.date(), source=Source.AGENT,
    )  # fmt: skip
    _register_at_install(new)
    swaps.gpu_swap_record(old_gpu=old, new_gpu=new, repair=repair, at=at + dt.timedelta(hours=9))
