"""RMA cases: a GPU sent back to its vendor, forward only (open → shipped → replacement_received
→ closed; open or shipped → rejected). Each move is a conditional UPDATE on the state it leaves,
so two people moving one case at once move it once (the other gets a 409). A card swap that brings
the case's `replacement_serial` links the new GPU (fleet.hooks.gpu_swapped)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from auditlog.models import LogEntry
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.core.audit import audit_line
from portal.core.errors import Conflict, InvalidInput
from portal.fleet import selectors as fleet
from portal.inventory import selectors
from portal.inventory.models import RmaCase
from portal.maintenance import selectors as maintenance

if TYPE_CHECKING:
    from portal.fleet.models import GpuSwap

State = RmaCase.State
FORWARD = {
    State.OPEN: (State.SHIPPED, State.REJECTED),
    State.SHIPPED: (State.REPLACEMENT_RECEIVED, State.REJECTED),
    State.REPLACEMENT_RECEIVED: (State.CLOSED,),
    State.CLOSED: (),
    State.REJECTED: (),
}
STAMPS = {
    State.SHIPPED: "shipped_at",
    State.REPLACEMENT_RECEIVED: "received_at",
    State.CLOSED: "closed_at",
    State.REJECTED: "closed_at",
}


def rma_case_create(
    *, gpu: str, vendor: str, case_number: str, ticket: int | None = None, notes: str = "", user=None,
    at: dt.datetime | None = None,
) -> RmaCase:  # fmt: skip
    """Open a case. 400 naming the field: an unknown GPU or ticket, a ticket about another GPU,
    vendor or case number missing; 409 naming `case_number` when the vendor's case is recorded."""
    problems: list[tuple[str, str]] = []
    gpu_row = fleet.gpus().select_related("host").filter(uuid=gpu or "").first()
    if gpu_row is None:
        problems.append(("gpu", f"No GPU with uuid {gpu!r}."))
    vendor, case_number = (vendor or "").strip(), (case_number or "").strip()
    for name, value, limit in (("vendor", vendor, 200), ("case_number", case_number, 100)):
        if not value:
            problems.append((name, "Required."))
        elif len(value) > limit:
            problems.append((name, f"At most {limit} characters."))
    if len(notes or "") > 20_000:
        problems.append(("notes", "At most 20000 characters."))
    ticket_row = None
    if ticket is not None:
        ticket_row = maintenance.tickets().filter(pk=ticket).first()
        if ticket_row is None:
            problems.append(("ticket", f"No ticket #{ticket}."))
        elif gpu_row is not None and ticket_row.gpu_id not in (None, gpu_row.pk):
            problems.append(("ticket", "This ticket is about another GPU."))
    if problems:
        raise InvalidInput("invalid RMA case", problems=problems)
    at = at or timezone.now()
    covered = selectors.gpu_warranty(gpu=gpu_row, on=timezone.localdate(at)) is not None
    try:
        with transaction.atomic():
            return RmaCase.objects.create(
                gpu=gpu_row, vendor=vendor, case_number=case_number, ticket=ticket_row, notes=notes or "",
                opened_at=at, covered=covered, created_by=user if getattr(user, "is_authenticated", False) else None,
            )  # fmt: skip
    except IntegrityError:
        raise Conflict(
            "case recorded already", field_errors={"case_number": "This vendor's case is recorded already."}
        ) from None


def rma_case_transition(
    *, case: RmaCase, state: str, tracking: str | None = None, replacement_serial: str | None = None,
    at: dt.datetime | None = None, user=None,
) -> RmaCase:  # fmt: skip
    """Move the case forward. 400: an unknown state, `tracking` other than for shipped,
    `replacement_serial` other than for replacement_received; 409 naming `state` for any move
    that is not forward from the case's state now."""
    problems = []
    if state not in State.values:
        problems.append(("state", f"One of {', '.join(State.values)}."))
    if tracking is not None and state != State.SHIPPED:
        problems.append(("tracking", "Only with state shipped."))
    if replacement_serial is not None and state != State.REPLACEMENT_RECEIVED:
        problems.append(("replacement_serial", "Only with state replacement_received."))
    for name, value, limit in (("tracking", tracking, 200), ("replacement_serial", replacement_serial, 64)):
        if value is not None and len(value.strip()) > limit:
            problems.append((name, f"At most {limit} characters."))
    if problems:
        raise InvalidInput("invalid transition", problems=problems)
    at = at or timezone.now()
    if state not in FORWARD[case.state]:
        raise _not_forward(case.state, state)
    changes: dict = {"state": state, STAMPS[state]: at}
    if tracking is not None:
        changes["tracking"] = tracking.strip()
    if replacement_serial is not None:
        serial = replacement_serial.strip()
        changes["replacement_serial"] = serial
        changes["replacement_gpu"] = (
            fleet.gpus().filter(serial=serial).exclude(pk=case.gpu_id).first() if serial else None
        )
    with transaction.atomic():
        if not RmaCase.objects.filter(pk=case.pk, state=case.state).update(**changes):
            case.refresh_from_db()
            raise _not_forward(case.state, state)
        audit_line(
            about=case, action=LogEntry.Action.UPDATE, actor=user,
            changes={name: [str(getattr(case, name, "")), str(value)] for name, value in changes.items()
                     if name != "replacement_gpu"},
        )  # fmt: skip
    case.refresh_from_db()
    return case


def _not_forward(current: str, wanted: str) -> Conflict:
    allowed = ", ".join(FORWARD[current]) or "none: the case is finished"
    return Conflict("not a forward move", field_errors={"state": f"From {current} only to: {allowed} (not {wanted})."})


def rma_replacement_link(*, swap: GpuSwap) -> int:
    """A card swap brought a GPU: the cases waiting for its serial name it. The count linked."""
    serial = swap.new_gpu.serial
    if not serial:
        return 0
    return RmaCase.objects.filter(replacement_serial=serial, replacement_gpu__isnull=True).update(
        replacement_gpu=swap.new_gpu
    )
