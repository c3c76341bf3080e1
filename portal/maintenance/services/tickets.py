"""Tickets: open or bump by fingerprint, reopen, escalate, auto-resolve, group, work by people.

The fingerprint is rule + subject, never the value, and at most one ticket per fingerprint is
open (a conditional unique constraint). Every change is a TicketEvent row.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from portal.core.errors import Conflict, InvalidInput
from portal.core.messages import Said, text_and_stored
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import GpuStatus
from portal.maintenance import hooks
from portal.maintenance import messages as msg
from portal.maintenance.models import (
    SEVERITY_RANK,
    RuleState,
    Silence,
    Ticket,
    TicketComment,
    TicketEvent,
)
from portal.maintenance.rules import RULES
from portal.maintenance.rules.base import fingerprint

if TYPE_CHECKING:  # types in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu, Host, MaintenanceRecord

REOPEN_WITHIN = dt.timedelta(hours=24)

# Event kinds the live ticket feed shows, and the word it shows for each.
_FEED_EVENTS = {
    TicketEvent.Kind.OPENED: "opened",
    TicketEvent.Kind.REOPENED: "reopened",
    TicketEvent.Kind.ESCALATED: "escalated",
    TicketEvent.Kind.AUTO_RESOLVED: "resolved",
    TicketEvent.Kind.RESOLVED_BY_RECORD: "resolved",
}
OPEN_STATES = list(Ticket.OPEN_STATES)
State = Ticket.State
Kind = TicketEvent.Kind


FEED_EVENT_KINDS = tuple(_FEED_EVENTS)  # with the state changes: the events a ticket feed shows


def feed_change(event: TicketEvent) -> str | None:
    """The word the ticket hooks (the live feed) get for this event; None: not a change people watch for."""
    return _FEED_EVENTS.get(event.kind) or (event.to_state if event.kind == TicketEvent.Kind.STATE else None)


def _event(*, note: str | Said = "", **fields) -> TicketEvent:
    """Record a ticket event (every change is a row) and hand the ones people watch for to the
    ticket hooks (the live ticket feed; see portal.maintenance.hooks). A note the portal writes
    is a message (portal.maintenance.messages); a person's is their text."""
    fields["note"], fields["note_msg"] = text_and_stored(note)
    event = TicketEvent.objects.create(**fields)
    change = feed_change(event)
    if change:
        hooks.ticket_changed.call(ticket=event.ticket, event=event, change=change)
    return event


def _title(rule_key: str, host, gpu) -> Said:
    if gpu is not None:
        return msg.TITLE(problem=rule_key, subject=msg.subject(host=gpu.host.hostname, gpu_index=gpu.index))
    return msg.TITLE(problem=rule_key, subject=msg.subject(host=host.hostname))


def subject_silenced(*, host_id: int, gpu_id: int | None, at: dt.datetime) -> bool:
    """A maintenance window on the host or the GPU covers `at`, or the GPU is out for repair."""
    if gpu_id is not None and fleet_selectors.gpus().filter(pk=gpu_id, status=GpuStatus.OUT_FOR_REPAIR).exists():
        return True
    windows = Silence.objects.filter(host_id=host_id, starts_at__lte=at, ends_at__gt=at)
    return windows.filter(gpu__isnull=True).exists() or (gpu_id is not None and windows.filter(gpu_id=gpu_id).exists())


@dataclasses.dataclass(frozen=True)
class _Firing:
    """One firing of a rule for a subject, as ticket_fire was given it (severity and silenced
    filled in)."""

    rule: str
    fingerprint: str
    host_id: int
    gpu_id: int | None
    at: dt.datetime
    value: float | None
    severity: str
    evidence: list | None
    note: str | Said
    silenced: bool


def ticket_fire(
    *,
    rule: str,
    host_id: int,
    gpu_id: int | None,
    at: dt.datetime,
    value: float | None = None,
    severity: str | None = None,
    evidence=None,
    note: str | Said = "",
    silenced: bool | None = None,
) -> tuple[Ticket, str]:
    """A rule fired for a subject. Returns the ticket and what happened: "opened", "repeated"
    (occurrences, last seen and peak bumped on the open ticket), or "reopened" (the same
    fingerprint was resolved less than 24 h ago). `note`: a message, or a person's words."""
    spec = RULES[rule]  # an unknown rule fails here, before any query
    fp = fingerprint(rule, gpu_id=gpu_id, host_id=host_id)
    if silenced is None:
        silenced = subject_silenced(host_id=host_id, gpu_id=gpu_id, at=at)
    firing = _Firing(
        rule=rule, fingerprint=fp, host_id=host_id, gpu_id=gpu_id, at=at, value=value,
        severity=severity or spec.severity, evidence=evidence, note=note, silenced=silenced,
    )  # fmt: skip
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().filter(fingerprint=fp, state__in=OPEN_STATES).first()
        if ticket is not None:
            return _repeat(ticket, firing), "repeated"
        ticket = _reopen_recent(firing)
        if ticket is not None:
            return ticket, "reopened"
        return _open(firing)


def _repeat(ticket: Ticket, firing: _Firing) -> Ticket:
    """The open ticket fired again: bump it, with its "repeated" event."""
    _bump(ticket, firing.at, firing.value, firing.severity)
    _event(ticket=ticket, kind=Kind.REPEATED, at=firing.at, value=firing.value, note=firing.note)
    return ticket


def _reopen_recent(firing: _Firing) -> Ticket | None:
    """Reopen the ticket with this fingerprint resolved or closed within REOPEN_WITHIN, if there
    is one and no one changed its state meanwhile (a conditional UPDATE); None otherwise."""
    recent = (
        Ticket.objects.select_for_update()
        .filter(
            fingerprint=firing.fingerprint,
            state__in=[State.RESOLVED, State.CLOSED],
            resolved_at__gte=firing.at - REOPEN_WITHIN,
        )
        .order_by("-resolved_at")
        .first()
    )
    if recent is None:
        return None
    previous = recent.state
    claimed = Ticket.objects.filter(pk=recent.pk, state=previous).update(
        state=State.OPEN, resolved_at=None, auto_resolved=False, resolved_by_record=None, silenced=firing.silenced
    )
    if not claimed:
        return None
    recent.refresh_from_db()
    _bump(recent, firing.at, firing.value, firing.severity)
    _event(
        ticket=recent, kind=Kind.REOPENED, at=firing.at, from_state=previous, to_state=State.OPEN, value=firing.value,
        note=firing.note or msg.FIRED_AGAIN(),
    )  # fmt: skip
    return recent


def _subject(host_id: int, gpu_id: int | None) -> tuple[Host, Gpu | None]:
    """The host and GPU (None for a host ticket) a new ticket is about."""
    if gpu_id is None:
        return fleet_selectors.hosts().get(pk=host_id), None
    gpu = fleet_selectors.gpus().select_related("host").get(pk=gpu_id)
    return gpu.host, gpu


def _open(firing: _Firing) -> tuple[Ticket, str]:
    """Open a new ticket, with its "opened" event; when another worker opened the same
    fingerprint a moment ago (the conditional unique constraint refuses a second), bump that one."""
    spec = RULES[firing.rule]
    host, gpu = _subject(firing.host_id, firing.gpu_id)
    title = _title(firing.rule, host, gpu)
    action = msg.ACTION(action=firing.rule)
    try:
        with transaction.atomic():
            ticket = Ticket.objects.create(
                fingerprint=firing.fingerprint, rule=firing.rule, host=host, gpu=gpu,
                title=str(title)[:200], title_msg=title.stored(), action=spec.action, action_msg=action.stored(),
                severity=firing.severity,
                first_seen=firing.at, last_seen=firing.at, peak_value=firing.value, unit=spec.unit,
                evidence={"readings": firing.evidence or [], "metric": spec.metric, "fired_at": firing.at.isoformat()},
                silenced=firing.silenced,
            )  # fmt: skip
    except IntegrityError:  # another worker opened it a moment ago
        ticket = Ticket.objects.select_for_update().get(fingerprint=firing.fingerprint, state__in=OPEN_STATES)
        return _repeat(ticket, firing), "repeated"
    _event(ticket=ticket, kind=Kind.OPENED, at=firing.at, to_state=State.OPEN, value=firing.value, note=firing.note)
    return ticket, "opened"


def _raise(ticket: Ticket, value, severity: str | None) -> bool:
    """Raise the ticket's peak to `value` and its severity to `severity` where they are higher
    (not saved). Returns whether the severity rose."""
    if value is not None and (ticket.peak_value is None or value > ticket.peak_value):
        ticket.peak_value = value
    if severity is not None and SEVERITY_RANK[severity] > SEVERITY_RANK[ticket.severity]:
        ticket.severity = severity
        return True
    return False


def _bump(ticket: Ticket, at: dt.datetime, value, severity) -> None:
    ticket.occurrences = F("occurrences") + 1
    ticket.last_seen = max(ticket.last_seen, at)
    _raise(ticket, value, severity)
    ticket.save(update_fields=["occurrences", "last_seen", "peak_value", "severity", "updated_at"])
    ticket.refresh_from_db(fields=["occurrences"])


def ticket_update(
    *,
    rule: str,
    host_id: int,
    gpu_id: int | None,
    at: dt.datetime,
    value=None,
    severity=None,
    note: str | Said = "",
) -> tuple[Ticket | None, str]:
    """A firing rule got worse: raise the open ticket's peak, and its severity ("escalated")."""
    fp = fingerprint(rule, gpu_id=gpu_id, host_id=host_id)
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().filter(fingerprint=fp, state__in=OPEN_STATES).first()
        if ticket is None:
            return None, ""
        ticket.last_seen = max(ticket.last_seen, at)
        previous = ticket.severity
        escalated = _raise(ticket, value, severity)
        # Saved before the event: the event counts open tickets by severity for the fleet tile.
        ticket.save(update_fields=["last_seen", "peak_value", "severity", "updated_at"])
        if escalated:
            note = note or msg.ESCALATED(before=previous, after=severity)
            _event(ticket=ticket, kind=Kind.ESCALATED, at=at, value=value, note=note)
        return ticket, "escalated" if escalated else "updated"


def _resolve(
    ticket: Ticket, *, at: dt.datetime, kind: str, user=None, record=None, note: str | Said = "", auto=False
) -> bool:
    previous = ticket.state
    claimed = Ticket.objects.filter(pk=ticket.pk, state__in=OPEN_STATES).update(
        state=State.RESOLVED, resolved_at=at, auto_resolved=auto, resolved_by_record=record, updated_at=timezone.now()
    )
    if not claimed:
        return False
    ticket.refresh_from_db()
    _event(ticket=ticket, kind=kind, at=at, from_state=previous, to_state=State.RESOLVED, user=user, note=note)
    return True


def ticket_auto_resolve(*, rule: str, host_id: int, gpu_id: int | None, at: dt.datetime) -> Ticket | None:
    """The rule's clear condition held: resolve its open ticket, marked as automatic. A host ticket
    that groups GPU tickets resolves with its last open child."""
    fp = fingerprint(rule, gpu_id=gpu_id, host_id=host_id)
    with transaction.atomic():
        ticket = Ticket.objects.filter(fingerprint=fp, state__in=OPEN_STATES).first()
        if ticket is not None:
            # Late readings (an agent's spool after an outage) may clear before the ticket was
            # last seen firing, e.g. "agent silent" opened while the backlog was on its way.
            at = max(at, ticket.last_seen)
        if ticket is None or not _resolve(ticket, at=at, kind=Kind.AUTO_RESOLVED, auto=True, note=msg.CLEARED()):
            return None
        if ticket.parent_id and not Ticket.objects.filter(parent_id=ticket.parent_id, state__in=OPEN_STATES).exists():
            parent = Ticket.objects.get(pk=ticket.parent_id)
            _resolve(parent, at=at, kind=Kind.AUTO_RESOLVED, auto=True, note=msg.GROUP_RESOLVED())
        return ticket


def tickets_group(*, rule: str, host_id: int, at: dt.datetime, fraction: float = 0.5) -> tuple[Ticket | None, str]:
    """When most GPUs of a host fire the same rule (more than `fraction` of its in-service GPUs,
    at least two), one host ticket holds their tickets; the GPU tickets link to it and send no
    notifications of their own. Returns the host ticket when one applies, and "opened"/"reopened"
    when it was (re)opened just now."""
    total = fleet_selectors.gpus().filter(host_id=host_id, status=GpuStatus.IN_SERVICE).count()
    firing = RuleState.objects.filter(rule=rule, host_id=host_id, gpu__isnull=False, state__in=["firing", "clearing"])
    count = firing.count()
    if count < 2 or total == 0 or count / total <= fraction:
        return None, ""
    host_fp = fingerprint(rule, host_id=host_id)
    parent = Ticket.objects.filter(fingerprint=host_fp, state__in=OPEN_STATES).first()
    outcome = ""
    if parent is None:
        note = msg.GROUP_COUNT(count=count, total=total)
        parent, outcome = ticket_fire(rule=rule, host_id=host_id, gpu_id=None, at=at, note=note)
    children = Ticket.objects.filter(rule=rule, host_id=host_id, gpu__isnull=False, state__in=OPEN_STATES).exclude(
        parent=parent
    )
    for child in children:
        ticket_group_under(ticket=child, parent=parent, at=at)
    return parent, outcome


def ticket_group_under(*, ticket: Ticket, parent: Ticket, at: dt.datetime, **changes) -> Ticket:
    """Link a GPU ticket to the host ticket that holds it (it then sends no notifications of its
    own), with its event row; `changes` are other fields saved with the link."""
    ticket.parent = parent
    for name, value in changes.items():
        setattr(ticket, name, value)
    ticket.save(update_fields=["parent", *changes, "updated_at"])
    _event(ticket=ticket, kind=Kind.GROUPED, at=at, note=msg.GROUPED_UNDER(parent=parent.pk))
    return ticket


# --- people working tickets ----------------------------------------------------------------

TRANSITIONS = {
    State.OPEN: {State.ACKNOWLEDGED, State.IN_PROGRESS, State.RESOLVED},
    State.ACKNOWLEDGED: {State.IN_PROGRESS, State.RESOLVED},
    State.IN_PROGRESS: {State.RESOLVED},
    State.RESOLVED: {State.CLOSED, State.OPEN},
    State.CLOSED: set(),
}


def ticket_transition(*, ticket: Ticket, to_state: str, user=None, note: str | Said = "") -> Ticket:
    """Move a ticket along open → acknowledged → in progress → resolved → closed. The change is a
    conditional UPDATE on the state the user saw, so two people cannot both apply a change."""
    if to_state not in State.values:
        raise InvalidInput(f"unknown state {to_state!r}", field_errors={"state": [f"must be one of {State.values}"]})
    previous = ticket.state
    if to_state not in TRANSITIONS[previous]:
        raise InvalidInput(
            f"a {previous} ticket cannot become {to_state}",
            field_errors={"state": [f"not allowed from {previous}; allowed: {sorted(TRANSITIONS[previous])}"]},
        )
    now = timezone.now()
    updates = {"state": to_state, "updated_at": now}
    if to_state == State.RESOLVED:
        updates.update(resolved_at=now, auto_resolved=False)
    if to_state == State.OPEN:
        updates.update(resolved_at=None, auto_resolved=False, resolved_by_record=None)
    with transaction.atomic():
        try:
            claimed = Ticket.objects.filter(pk=ticket.pk, state=previous).update(**updates)
        except IntegrityError as error:  # reopening while a newer ticket with the fingerprint is open
            raise InvalidInput(
                "another ticket for the same rule and subject is open", field_errors={"state": [str(error)[:200]]}
            ) from error
        if not claimed:
            raise Conflict("the ticket changed meanwhile; reload and try again")
        _event(ticket=ticket, kind=Kind.STATE, at=now, from_state=previous, to_state=to_state, user=user, note=note)
    ticket.refresh_from_db()
    return ticket


def ticket_assign(*, ticket: Ticket, assignee, user=None) -> Ticket:
    if assignee is not None and not assignee.is_active:
        raise InvalidInput("inactive user", field_errors={"assignee": ["this user is not active"]})
    with transaction.atomic():
        ticket.assignee = assignee
        ticket.save(update_fields=["assignee", "updated_at"])
        _event(
            ticket=ticket, kind=Kind.ASSIGNED, at=timezone.now(), user=user,
            note=msg.ASSIGNED(user=assignee.get_username()) if assignee else msg.UNASSIGNED(),
        )  # fmt: skip
    return ticket


def ticket_comment_add(*, ticket: Ticket, author, body: str) -> TicketComment:
    body = (body or "").strip()
    if not body:
        raise InvalidInput("empty comment", field_errors={"body": ["write something"]})
    if len(body) > 10_000:
        raise InvalidInput("comment too long", field_errors={"body": ["at most 10,000 characters"]})
    return TicketComment.objects.create(ticket=ticket, author=author, body=body)


# --- resolution by a maintenance record ----------------------------------------------------

RECORD_SLACK = dt.timedelta(hours=24)
BASELINE_RESETS = {
    fleet_selectors.Kind.CLEANING: ("cooling_degradation",),
    fleet_selectors.Kind.THERMAL_PASTE: ("cooling_degradation",),
    fleet_selectors.Kind.FAN_REPLACEMENT: ("fan_wear",),
}


def tickets_resolve_by_record(*, record: MaintenanceRecord) -> list[Ticket]:
    """Logging the record a ticket asks for (a cleaning for "cleaning due", a connection check
    for a degraded PCIe link, …) resolves it and links both ways (ticket.resolved_by_record,
    record.resolved_tickets). A record on a whole host counts for each of its GPUs. Records
    that set a new baseline (a cleaning for the dust rule) reset it."""
    rules = [key for key, rule in RULES.items() if record.kind in rule.resolved_by]
    tickets = Ticket.objects.filter(host_id=record.host_id, rule__in=rules, state__in=OPEN_STATES)
    if record.gpu_id is not None:
        tickets = tickets.filter(Q(gpu_id=record.gpu_id) | Q(gpu__isnull=True, rule__startswith="schedule_"))
    resolved = []
    with transaction.atomic():
        for ticket in tickets.select_for_update():
            if ticket.first_seen > record.performed_at + RECORD_SLACK:
                continue
            if _resolve(
                ticket, at=timezone.now(), kind=Kind.RESOLVED_BY_RECORD, record=record,
                user=record.recorded_by, note=str(record),
            ):  # fmt: skip
                resolved.append(ticket)
                RuleState.objects.filter(key=ticket.fingerprint, state__in=["firing", "clearing", "pending"]).update(
                    state="ok", since_ts=None
                )
        resets = BASELINE_RESETS.get(record.kind, ())
        if resets:
            states = RuleState.objects.filter(rule__in=resets, host_id=record.host_id)
            if record.gpu_id is not None:
                states = states.filter(gpu_id=record.gpu_id)
            states.update(data={}, state="ok", since_ts=None)
    if resolved:
        from portal.maintenance.services.notify import notify_ticket

        for ticket in resolved:
            notify_ticket(ticket=ticket, event="resolved")
    return resolved


def ticket_history_add(*, ticket: Ticket, note: str | Said, user=None) -> TicketEvent:
    """A line in the ticket's history from a higher app (the scheduler: node drained, resumed, the
    job that was running on the GPU). Not a state change, so no hooks run."""
    text, stored = text_and_stored(note)
    return TicketEvent.objects.create(
        ticket=ticket, kind=Kind.SCHEDULER, at=timezone.now(), user=user, note=text, note_msg=stored
    )


def tickets_resolve_swapped_out(*, host_id: int, gpu_id: int, replacement: str, at: dt.datetime) -> list[Ticket]:
    """A GPU replaced by a card swapped into its slot (fleet.swaps) is not silent, it is gone: its
    open "Agent silent" ticket resolves, marked automatic, noting the replacement (`replacement`:
    its serial, or uuid), and the host's with it when it holds no other open GPU ticket; the
    rule's state for the GPU goes back to ok. Running it twice changes nothing more."""
    fp = fingerprint("agent_silent", gpu_id=gpu_id, host_id=host_id)
    resolved = []
    with transaction.atomic():
        for ticket in Ticket.objects.select_for_update().filter(fingerprint=fp, state__in=OPEN_STATES):
            note = msg.REPLACED(serial=replacement)
            if _resolve(ticket, at=max(at, ticket.last_seen), kind=Kind.AUTO_RESOLVED, auto=True, note=note):
                resolved.append(ticket)
        for ticket in resolved:
            if (
                ticket.parent_id
                and not Ticket.objects.filter(parent_id=ticket.parent_id, state__in=OPEN_STATES).exists()
            ):
                parent = Ticket.objects.get(pk=ticket.parent_id)
                _resolve(parent, at=max(at, parent.last_seen), kind=Kind.AUTO_RESOLVED, auto=True,
                         note=msg.GROUP_RESOLVED())  # fmt: skip
        RuleState.objects.filter(key=fp).update(state="ok", since_ts=None)
    return resolved


# --- keyed tickets -------------------------------------------------------------------------
# About something that is not a host's condition (a spare part, a warranty contract): keyed by
# the rule and that thing's key rather than the subject, one open at a time, opened and resolved
# by the app that owns the thing (inventory). The ticket still names a host (every ticket has
# one): the host the caller says is concerned.


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
        _event(ticket=ticket, kind=Kind.OPENED, at=at, to_state=State.OPEN, note=note)
        return ticket, True


def ticket_resolve_keyed(*, rule: str, key: str, at: dt.datetime, note: str | Said = "") -> Ticket | None:
    """Resolve the open ticket of `rule` for `key` (automatically: its cause went away); None when none was open."""
    fp = keyed_fingerprint(rule=rule, key=key)
    with transaction.atomic():
        ticket = Ticket.objects.filter(fingerprint=fp, state__in=OPEN_STATES).first()
        if ticket is None:
            return None
        at = max(at, ticket.last_seen)
        resolved = _resolve(ticket, at=at, kind=Kind.AUTO_RESOLVED, auto=True, note=note or msg.CLEARED())
        return ticket if resolved else None


# --- for the older apps above (they write tickets through maintenance's services) -----


def ticket_evidence_add(*, ticket: Ticket, key: str, value) -> Ticket:
    """Keep what another app found under `key` of the ticket's evidence, beside the rule's own
    (diagnostics: the tests that failed). One query."""
    evidence = dict(ticket.evidence or {})
    evidence[key] = value
    Ticket.objects.filter(pk=ticket.pk).update(evidence=evidence)
    ticket.evidence = evidence
    return ticket
