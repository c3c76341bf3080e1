"""Drain and resume Slurm nodes for tickets and people; record the job a GPU ticket interrupts.

A ticket change only writes SchedulerAction rows (inside the ticket's transaction) and
`portal.scheduler.enqueue` sends the task after the commit: Slurm being slow or down never holds
or fails ingest or a ticket. The task, the beat sweep and a person's request all run a host's due
actions through `scheduler_host_actions_run`, oldest first, each claimed with a conditional UPDATE.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.core.errors import InvalidInput, NotFound
from portal.diagnostics import services as diagnostics
from portal.fleet.models import Host
from portal.maintenance.models import SEVERITY_RANK, Ticket
from portal.maintenance.services.tickets import ticket_history_add
from portal.scheduler.adapters import (
    REASON_PREFIX,
    NodeUnknown,
    SchedulerAdapter,
    SchedulerUnavailable,
    SlurmCli,
    SlurmRest,
    clean_reason,
)
from portal.scheduler.models import SchedulerAction

log = logging.getLogger(__name__)

Action = SchedulerAction
CLAIM_FOR = dt.timedelta(seconds=90)
REST_HOURS_MAX = 168


def scheduler_enabled() -> bool:
    return bool(settings.SLURM_ENABLED)


def scheduler_adapter() -> SchedulerAdapter:
    if settings.SLURM_MODE == "rest":
        return SlurmRest(
            url=settings.SLURM_REST_URL, user=settings.SLURM_REST_USER, token=settings.SLURM_REST_TOKEN,
            timeout=settings.SLURM_TIMEOUT,
        )  # fmt: skip
    return SlurmCli(bin_dir=settings.SLURM_BIN_DIR, timeout=settings.SLURM_TIMEOUT)


def node_name(host: Host) -> str:
    return host.slurm_node or host.hostname


def drain_reason(ticket: Ticket) -> str:
    return clean_reason(f"{REASON_PREFIX}{ticket.pk}: {ticket.title}")


def _drains(severity: str) -> bool:
    threshold = settings.SLURM_DRAIN_SEVERITY
    if threshold not in SEVERITY_RANK:  # "none": never by itself
        return False
    return SEVERITY_RANK.get(severity, -1) >= SEVERITY_RANK[threshold]


def _draining_tickets(host_id: int):
    severities = [s for s in SEVERITY_RANK if _drains(s)]
    return Ticket.objects.filter(host_id=host_id, state__in=Ticket.OPEN_STATES, severity__in=severities)


def _action_add(*, host: Host, kind: str, source: str, reason: str = "", ticket=None, user=None, not_before=None):
    return Action.objects.create(
        host=host, node=node_name(host), kind=kind, source=source, reason=clean_reason(reason), ticket=ticket,
        requested_by=user, not_before=not_before or timezone.now(),
    )  # fmt: skip


def scheduler_ticket_changed(*, ticket: Ticket, change: str) -> bool:
    """A ticket changed (portal.maintenance.hooks, through portal.scheduler.enqueue): a draining
    ticket opened → drain; the last one resolved → resume; a GPU ticket opened → record the job
    running on that GPU. Returns whether it wrote actions (the caller queues them)."""
    if not scheduler_enabled():
        return False
    # A savepoint: should this fail, the ticket's own transaction goes on (the hook logs the error).
    with transaction.atomic():
        return _ticket_actions(ticket, change)


def _ticket_actions(ticket: Ticket, change: str) -> bool:
    host = ticket.host
    wrote = False
    if change in ("opened", "reopened") and ticket.gpu_id is not None:
        _action_add(host=host, kind=Action.Kind.JOBS, source=Action.Source.TICKET, ticket=ticket)
        wrote = True
    if change in ("opened", "reopened", "escalated") and _drains(ticket.severity):
        _action_add(
            host=host, kind=Action.Kind.DRAIN, source=Action.Source.TICKET, ticket=ticket, reason=drain_reason(ticket)
        )
        wrote = True
    elif (
        change in ("resolved", "closed")
        and _drains(ticket.severity)
        # Resumed only once a diagnostic passed since the ticket opened (portal.diagnostics requests
        # one); otherwise scheduler_diagnostic_finished resumes the node when it passes.
        and diagnostics.ticket_gate_passed(ticket)
    ):
        _action_add(host=host, kind=Action.Kind.RESUME, source=Action.Source.TICKET, ticket=ticket)
        wrote = True
    return wrote


def scheduler_diagnostic_finished(*, diagnostic) -> bool:
    """A diagnostic passed (portal.diagnostics' hook, through portal.scheduler.enqueue): a node that
    a resolved ticket drained, waiting for it, is resumed (the resume action itself leaves it drained
    while a draining ticket is open, or when a person drained it). Returns whether it wrote an action."""
    if not scheduler_enabled() or diagnostic.state not in ("passed", "warned"):
        return False
    recent = timezone.now() - diagnostics.GATE_WINDOW
    waiting = [
        ticket
        for ticket in Ticket.objects.filter(
            host_id=diagnostic.host_id, state__in=[Ticket.State.RESOLVED, Ticket.State.CLOSED], resolved_at__gte=recent
        ).order_by("-resolved_at")
        if _drains(ticket.severity)
        and Action.objects.filter(ticket=ticket, kind=Action.Kind.DRAIN).exists()
        and not Action.objects.filter(ticket=ticket, kind=Action.Kind.RESUME, source=Action.Source.TICKET).exists()
        and diagnostics.ticket_gate_passed(ticket)
    ]
    if not waiting:
        return False
    with transaction.atomic():
        _action_add(host=waiting[0].host, kind=Action.Kind.RESUME, source=Action.Source.TICKET, ticket=waiting[0])
    return True


def scheduler_rest_request(*, ticket: Ticket, hours: int, user) -> list[SchedulerAction]:
    """ "Give the GPUs rest": drain the ticket's host after its current jobs for `hours`, then
    resume it by itself (a second action, due when the time is up)."""
    if not scheduler_enabled():
        raise NotFound("Slurm is not enabled (SLURM_ENABLED)")
    if not isinstance(hours, int) or not 1 <= hours <= REST_HOURS_MAX:
        raise InvalidInput("bad hours", field_errors={"hours": [f"a whole number of hours, 1 to {REST_HOURS_MAX}"]})
    with transaction.atomic():
        now = timezone.now()
        reason = f"{REASON_PREFIX}{ticket.pk}: rest for {hours} h: {ticket.title}"
        drain = _action_add(
            host=ticket.host, kind=Action.Kind.DRAIN, source=Action.Source.REST, ticket=ticket, user=user,
            reason=reason,
        )  # fmt: skip
        resume = _action_add(
            host=ticket.host, kind=Action.Kind.RESUME, source=Action.Source.REST, ticket=ticket, user=user,
            not_before=now + dt.timedelta(hours=hours),
        )  # fmt: skip
        ticket_history_add(
            ticket=ticket, user=user, note=f"rest for the GPUs asked: node {drain.node} drained for {hours} h"
        )
    return [drain, resume]


def scheduler_manual_action(*, host: Host, kind: str, reason: str, user) -> SchedulerAction:
    """A person drains or resumes a node by hand (a maintenance window), done at once; when Slurm
    does not answer the action stays pending (the sweep retries it) and SchedulerUnavailable says why."""
    if not scheduler_enabled():
        raise NotFound("Slurm is not enabled (SLURM_ENABLED)")
    reason = clean_reason(reason or "")
    if kind == Action.Kind.DRAIN and not reason:
        raise InvalidInput("a drain needs a reason", field_errors={"reason": ["say why the node is drained"]})
    adapter = scheduler_adapter()
    # A node Slurm does not know is refused before anything is written; a Slurm that does not
    # answer gets the action queued (503 now, done by the sweep later).
    with contextlib.suppress(SchedulerUnavailable):
        adapter.node(node_name(host))
    action = _action_add(host=host, kind=kind, source=Action.Source.PERSON, reason=reason, user=user)
    scheduler_host_actions_run(host_id=host.pk, adapter=adapter)
    action.refresh_from_db()
    if action.state == Action.State.PENDING:
        raise SchedulerUnavailable(
            f"Slurm could not be reached: {action.last_error}", problems=[("slurm", action.last_error)]
        )
    if action.state == Action.State.FAILED:
        raise NodeUnknown(action.last_error, problems=[("hostname", action.last_error)])
    return action


def scheduler_host_actions_run(*, host_id: int, adapter: SchedulerAdapter | None = None) -> int:
    """Carry out the host's due actions, oldest first; stops at the first that Slurm did not
    answer (the later ones wait for it). Returns how many were finished."""
    finished = 0
    adapter = adapter or scheduler_adapter()
    due = Action.objects.filter(host_id=host_id, state=Action.State.PENDING, not_before__lte=timezone.now())
    for action_id in due.order_by("created_at", "id").values_list("id", flat=True):
        action = _claim(action_id)
        if action is None:
            continue
        try:
            _carry_out(action, adapter)
        except SchedulerUnavailable as error:
            _failed_attempt(action, str(error), give_up=action.kind == Action.Kind.JOBS)
            if action.kind != Action.Kind.JOBS:
                break
        except NodeUnknown as error:
            _failed_attempt(action, str(error), give_up=True)
        else:
            finished += 1
    return finished


def scheduler_sweep(*, adapter: SchedulerAdapter | None = None) -> int:
    """Every host with due actions (the beat sweep: after an outage of Slurm or the broker)."""
    if not scheduler_enabled():
        return 0
    now = timezone.now()
    hosts = (
        Action.objects.filter(state=Action.State.PENDING, not_before__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .values_list("host_id", flat=True)
        .distinct()
    )
    adapter = adapter or scheduler_adapter()
    return sum(scheduler_host_actions_run(host_id=host_id, adapter=adapter) for host_id in list(hosts))


def _claim(action_id: int) -> SchedulerAction | None:
    now = timezone.now()
    claimed = (
        Action.objects.filter(pk=action_id, state=Action.State.PENDING)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + CLAIM_FOR, last_attempt_at=now)
    )
    if not claimed:
        return None
    action = Action.objects.select_related("host", "ticket", "ticket__gpu").get(pk=action_id)
    action.attempts += 1
    return action


def _failed_attempt(action: SchedulerAction, error: str, *, give_up: bool) -> None:
    action.last_error = error[:1000]
    action.claimed_until = None
    fields = ["attempts", "last_error", "claimed_until", "last_attempt_at"]
    if give_up:
        action.state = Action.State.FAILED
        action.done_at = timezone.now()
        fields += ["state", "done_at"]
    action.save(update_fields=fields)
    log.warning("Slurm action %s (%s %s) failed: %s", action.pk, action.kind, action.node, error)


def _finish(action: SchedulerAction, state: str, outcome: str) -> None:
    with transaction.atomic():
        action.state = state
        action.outcome = outcome
        action.done_at = timezone.now()
        action.claimed_until = None
        action.save(update_fields=["state", "outcome", "done_at", "claimed_until", "attempts", "last_attempt_at"])
        if action.ticket_id is not None:
            ticket_history_add(ticket=action.ticket, note=outcome, user=action.requested_by)


def _carry_out(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    if action.kind == Action.Kind.JOBS:
        return _record_job(action, adapter)
    if action.source == Action.Source.PERSON:
        if action.kind == Action.Kind.DRAIN:
            adapter.drain(action.node, action.reason)
            return _finish(action, Action.State.DONE, f"Slurm node {action.node} drained by hand: {action.reason}")
        adapter.resume(action.node)
        note = f": {action.reason}" if action.reason else ""
        return _finish(action, Action.State.DONE, f"Slurm node {action.node} resumed by hand{note}")
    if action.kind == Action.Kind.DRAIN:
        return _drain_for_ticket(action, adapter)
    return _resume_for_ticket(action, adapter)


def _drain_for_ticket(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    ticket = action.ticket
    if action.source == Action.Source.TICKET and (ticket is None or not ticket.is_open):
        return _finish(action, Action.State.SKIPPED, "the ticket was resolved before Slurm answered: no drain")
    node = adapter.node(action.node)
    if "drain" in node.state and action.source == Action.Source.TICKET:
        return _finish(
            action, Action.State.SKIPPED, f"Slurm node {action.node} was already drained ({node.reason or 'no reason'})"
        )
    adapter.drain(action.node, action.reason)
    return _finish(action, Action.State.DONE, f"Slurm node {action.node} drained: {action.reason}")


def _resume_for_ticket(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    still_open = _draining_tickets(action.host_id).order_by("id").first()
    if still_open is not None:
        return _finish(
            action, Action.State.SKIPPED, f"Slurm node {action.node} stays drained: ticket #{still_open.pk} is open"
        )
    node = adapter.node(action.node)
    if "drain" not in node.state:
        return _finish(action, Action.State.SKIPPED, f"Slurm node {action.node} was not drained ({node.state})")
    if not node.reason.startswith(REASON_PREFIX):
        return _finish(
            action, Action.State.SKIPPED,
            f"Slurm node {action.node} stays drained: a person drained it ({node.reason or 'no reason'})",
        )  # fmt: skip
    adapter.resume(action.node)
    why = "the rest is over" if action.source == Action.Source.REST else "no draining ticket is open"
    return _finish(action, Action.State.DONE, f"Slurm node {action.node} resumed: {why}")


def _record_job(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    ticket = action.ticket
    if ticket is None or ticket.gpu is None:
        return _finish(action, Action.State.SKIPPED, "no GPU to look up")
    index = ticket.gpu.index
    jobs = [job for job in adapter.jobs(action.node) if index in job.gpus]
    if not jobs:
        return _finish(action, Action.State.DONE, f"no Slurm job was running on GPU {index} when this ticket opened")
    described = "; ".join(f"job {j.id} ({j.name}, user {j.user})" for j in jobs)
    return _finish(action, Action.State.DONE, f"running on GPU {index} when this ticket opened: {described}")
