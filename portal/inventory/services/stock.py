"""Spare parts and their stock: every change of `on_hand` is a movement row, written with a
conditional UPDATE of the part (`on_hand + delta >= 0`) in the same transaction, so that two
technicians taking the last part at once get one part between them: the second UPDATE waits for
the first one's row lock, then finds the condition false (409), whatever the engine.

"Spare stock low: <part>" (rule `spare_stock_low`) opens once when a movement takes the stock to
the reorder level or below, and resolves when stock comes back above it."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from portal.core.errors import Conflict, InvalidInput, NotFound
from portal.fleet import selectors as fleet
from portal.inventory import messages as msg
from portal.inventory.models import Part, StockMovement
from portal.maintenance.services.tickets import ticket_open_keyed, ticket_resolve_keyed

if TYPE_CHECKING:
    from portal.fleet.models import MaintenanceRecord

log = logging.getLogger(__name__)

RULE = "spare_stock_low"
MAX_QUANTITY = 100_000


def _clean_text(values: dict, name: str, *, required: bool, limit: int, problems: list) -> str:
    value = values.get(name)
    value = "" if value is None else str(value).strip()
    if required and not value:
        problems.append((name, "Required."))
    elif len(value) > limit:
        problems.append((name, f"At most {limit} characters."))
    return value


def part_create(*, name: str, kind: str, part_number: str = "", location: str = "", reorder_at: int = 0) -> Part:
    """A new part, none on hand. 400 naming the field: a name missing or taken, an unknown kind,
    a negative reorder level."""
    values = {"name": name, "part_number": part_number, "location": location}
    problems: list[tuple[str, str]] = []
    name = _clean_text(values, "name", required=True, limit=200, problems=problems)
    part_number = _clean_text(values, "part_number", required=False, limit=100, problems=problems)
    location = _clean_text(values, "location", required=False, limit=200, problems=problems)
    if kind not in Part.Kind.values:
        problems.append(("kind", f"One of {', '.join(Part.Kind.values)}."))
    if not isinstance(reorder_at, int) or isinstance(reorder_at, bool) or not 0 <= reorder_at <= MAX_QUANTITY:
        problems.append(("reorder_at", f"A whole number from 0 to {MAX_QUANTITY}."))
    if name and Part.objects.filter(name__iexact=name).exists():
        problems.append(("name", "A part with this name exists already."))
    if problems:
        raise InvalidInput("invalid part", problems=problems)
    try:
        with transaction.atomic():
            return Part.objects.create(
                name=name, kind=kind, part_number=part_number, location=location, reorder_at=reorder_at
            )
    except IntegrityError:
        raise InvalidInput("invalid part", field_errors={"name": "A part with this name exists already."}) from None


def movement_record(
    *,
    part: Part,
    delta: int,
    reason: str,
    record: MaintenanceRecord | None = None,
    notes: str = "",
    user=None,
    at: dt.datetime | None = None,
    loc: str = "delta",
) -> StockMovement:
    """Move `delta` parts in or out of stock. 400: delta 0 or not a whole number, an unknown reason;
    409 naming `loc` when the stock would fall below zero (nothing written)."""
    problems = []
    if not isinstance(delta, int) or isinstance(delta, bool) or delta == 0 or abs(delta) > MAX_QUANTITY:
        problems.append((loc, f"A whole number other than 0, at most {MAX_QUANTITY} either way."))
    if reason not in StockMovement.Reason.values:
        problems.append(("reason", f"One of {', '.join(StockMovement.Reason.values)}."))
    if len(notes or "") > 20_000:
        problems.append(("notes", "At most 20000 characters."))
    if problems:
        raise InvalidInput("invalid movement", problems=problems)
    at = at or timezone.now()
    with transaction.atomic():
        moved = Part.objects.filter(pk=part.pk, on_hand__gte=-delta).update(on_hand=F("on_hand") + delta)
        if not moved:
            if not Part.objects.filter(pk=part.pk).exists():
                raise NotFound(f"no part {part.pk}", field_errors={"part": "No such part."})
            on_hand = Part.objects.values_list("on_hand", flat=True).get(pk=part.pk)
            raise Conflict(
                "not enough stock",
                field_errors={loc: f"Only {on_hand} of {part.name} on hand; {-delta} asked for."},
            )
        part.refresh_from_db(fields=["on_hand", "reorder_at", "name", "location"])
        movement = StockMovement.objects.create(
            part=part, delta=delta, reason=reason, record=record, notes=notes or "", on_hand_after=part.on_hand,
            at=at, by=user if getattr(user, "is_authenticated", False) else None,
        )  # fmt: skip
        _stock_ticket(part=part, movement=movement)
    return movement


def _ticket_host_id(movement: StockMovement) -> int | None:
    """Every ticket names a host: the one the movement's record is about, else the fleet's first."""
    if movement.record_id is not None:
        return movement.record.host_id
    return fleet.hosts().order_by("hostname").values_list("pk", flat=True).first()


def _stock_ticket(*, part: Part, movement: StockMovement) -> None:
    if movement.delta < 0 and part.on_hand <= part.reorder_at:
        host_id = _ticket_host_id(movement)
        if host_id is None:
            log.warning("part %s is low, but there is no host for its ticket", part.pk)
            return
        ticket_open_keyed(
            rule=RULE, key=f"part/{part.pk}", host_id=host_id, at=movement.at,
            title=msg.STOCK_LOW_TITLE(part=part.name),
            note=msg.STOCK_LOW_NOTE(on_hand=part.on_hand, reorder_at=part.reorder_at, location=part.location or "—"),
            evidence={"part": part.pk, "on_hand": part.on_hand, "reorder_at": part.reorder_at},
        )  # fmt: skip
    elif movement.delta > 0 and part.on_hand > part.reorder_at:
        ticket_resolve_keyed(
            rule=RULE, key=f"part/{part.pk}", at=movement.at,
            note=msg.STOCK_RECEIVED_NOTE(on_hand=part.on_hand, reorder_at=part.reorder_at),
        )  # fmt: skip


def parts_used_record(*, record: MaintenanceRecord, value, user=None) -> list[StockMovement]:
    """A maintenance record's `parts_used` ([{"part": id, "quantity": n}]): one `used` movement
    each, inside the record's transaction (fleet.hooks.record_fields), so a short stock (409
    naming `parts_used`) or a bad entry (400) undoes the record too."""
    entries = _parts_used_checked(value)
    parts = Part.objects.in_bulk([part_id for part_id, _ in entries])
    missing = [(f"parts_used.{i}.part", "No such part.") for i, entry in enumerate(value) if entry["part"] not in parts]
    if missing:
        raise InvalidInput("invalid parts_used", problems=missing)
    movements = []
    # In id order: two records taking the same parts lock them in one order (no deadlock).
    for part_id, quantity in sorted(entries):
        movements.append(
            movement_record(
                part=parts[part_id],
                delta=-quantity,
                reason=StockMovement.Reason.USED,
                record=record,
                user=user,
                at=record.performed_at,
                loc="parts_used",
            )  # fmt: skip
        )
    return movements


def _parts_used_checked(value) -> list[tuple[int, int]]:
    if not isinstance(value, list) or not value or len(value) > 100:
        raise InvalidInput("invalid parts_used", field_errors={"parts_used": "A list of 1 to 100 {part, quantity}."})
    problems, totals = [], {}
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or set(entry) - {"part", "quantity"}:
            problems.append((f"parts_used.{i}", "An object with `part` (an id) and `quantity`."))
            continue
        part, quantity = entry.get("part"), entry.get("quantity", 1)
        if not isinstance(part, int) or isinstance(part, bool):
            problems.append((f"parts_used.{i}.part", "A part id."))
            continue
        if not isinstance(quantity, int) or isinstance(quantity, bool) or not 1 <= quantity <= MAX_QUANTITY:
            problems.append((f"parts_used.{i}.quantity", f"A whole number from 1 to {MAX_QUANTITY}."))
            continue
        totals[part] = totals.get(part, 0) + quantity
    if problems:
        raise InvalidInput("invalid parts_used", problems=problems)
    return list(totals.items())
