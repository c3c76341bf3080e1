"""Tickets about something that is not a host's condition (a spare part, a warranty contract):
keyed by the rule and that thing's key rather than the subject, one open at a time, opened and
resolved by the app that owns the thing (inventory). The ticket still names a host (every ticket
has one): the host the caller says is concerned."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction

from portal.core.messages import Said
from portal.maintenance import messages as msg
from portal.maintenance.models import Ticket, TicketEvent
from portal.maintenance.rules import RULES
from portal.maintenance.services.tickets import OPEN_STATES, _event, _resolve


def keyed_fingerprint(*, rule: str, key: str) -> str:
    return f"{rule}/key/{key}"


def ticket_open_keyed(
    *,
    rule: str,
    key: str,
    host_id: int,
    gpu_id: int | None = None,
    at: dt.datetime,
    title: Said,
    note: str | Said = "",
    evidence: dict | None = None,
) -> tuple[Ticket, bool]:
    """Open the ticket of `rule` for `key` unless one is open already. Returns the ticket and
    whether it opened now (two callers at once: the conditional unique constraint keeps one)."""
    spec = RULES[rule]
    fp = keyed_fingerprint(rule=rule, key=key)
    with transaction.atomic():
        ticket = Ticket.objects.filter(fingerprint=fp, state__in=OPEN_STATES).first()
        if ticket is not None:
            return ticket, False
        try:
            with transaction.atomic():
                ticket = Ticket.objects.create(
                    fingerprint=fp, rule=rule, host_id=host_id, gpu_id=gpu_id,
                    title=str(title)[:200], title_msg=title.stored(),
                    action=spec.action, action_msg=msg.ACTION(action=rule).stored(), severity=spec.severity,
                    first_seen=at, last_seen=at, unit=spec.unit, evidence=evidence or {},
                )  # fmt: skip
        except IntegrityError:  # opened by another caller a moment ago
            return Ticket.objects.get(fingerprint=fp, state__in=OPEN_STATES), False
        _event(ticket=ticket, kind=TicketEvent.Kind.OPENED, at=at, to_state=Ticket.State.OPEN, note=note)
        return ticket, True


def ticket_resolve_keyed(*, rule: str, key: str, at: dt.datetime, note: str | Said = "") -> Ticket | None:
    """Resolve the open ticket of `rule` for `key` (automatically: its cause went away); None when none was open."""
    fp = keyed_fingerprint(rule=rule, key=key)
    with transaction.atomic():
        ticket = Ticket.objects.filter(fingerprint=fp, state__in=OPEN_STATES).first()
        if ticket is None:
            return None
        at = max(at, ticket.last_seen)
        resolved = _resolve(ticket, at=at, kind=TicketEvent.Kind.AUTO_RESOLVED, auto=True, note=note or msg.CLEARED())
        return ticket if resolved else None
