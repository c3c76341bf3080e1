"""Drain and resume Slurm nodes for tickets and people; record the job a GPU ticket interrupts.

A ticket change only writes SchedulerAction rows (inside the ticket's transaction) and
`portal.scheduler.enqueue` sends the task after the commit: Slurm being slow or down never holds
or fails ingest or a ticket. The task, the beat sweep and a person's request all run a host's due
actions through `scheduler_host_actions_run`, oldest first, each claimed with a conditional UPDATE.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from portal.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from portal.core.messages import Said, shown, text_and_stored
from portal.diagnostics import selectors as diagnostics_selectors
from portal.diagnostics import services as diagnostics
from portal.fleet import hooks as fleet_hooks
from portal.fleet import selectors as fleet_selectors
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.services.tickets import ticket_history_add
from portal.scheduler import hooks, messages
from portal.scheduler.adapters import (
    BURN_IN_PREFIX,
    REASON_PREFIX,
    WINDOW_PREFIX,
    Node,
    NodeUnknown,
    SchedulerAdapter,
    SchedulerUnavailable,
    SlurmCli,
    SlurmRest,
    clean_reason,
    is_portal_reason,
)
from portal.scheduler.models import SchedulerAction

if TYPE_CHECKING:
    from portal.fleet.models import Gpu, Host
    from portal.maintenance.models import Ticket

log = logging.getLogger(__name__)

Action = SchedulerAction
GpuStatus = fleet_selectors.GpuStatus
SEVERITY_RANK = maintenance_selectors.SEVERITY_RANK
TicketState = maintenance_selectors.TicketState
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


# How long an answer of Slurm about a node (state, reason, running jobs) serves reads: the
# selectors keep it in Django's cache (per process unless CACHES says otherwise).
NODE_STATUS_CACHE_S = 5


def node_status_cache_key(node: str) -> str:
    return f"scheduler:node-status:{node}"


def node_status_forget(node: str) -> None:
    """The portal changed the node: the next read asks Slurm."""
    cache.delete(node_status_cache_key(node))


def drain_reason(ticket: Ticket) -> str:
    return clean_reason(f"{REASON_PREFIX}{ticket.pk}: {ticket.title}")


def gpus_named(gpus: list[Gpu]) -> str:
    return ", ".join(f"GPU {gpu.index} ({gpu.uuid})" for gpu in gpus)


def burn_in_reason(gpus: list[Gpu]) -> str:
    return clean_reason(f"{BURN_IN_PREFIX}{gpus_named(gpus)}")


def _drains(severity: str) -> bool:
    threshold = settings.SLURM_DRAIN_SEVERITY
    if threshold not in SEVERITY_RANK:  # "none": never by itself
        return False
    return SEVERITY_RANK.get(severity, -1) >= SEVERITY_RANK[threshold]


def _draining_tickets(host_id: int):
    severities = [s for s in SEVERITY_RANK if _drains(s)]
    return maintenance_selectors.tickets().filter(
        host_id=host_id, state__in=maintenance_selectors.OPEN_STATES, severity__in=severities
    )


_BLOCKER_LOCS = {
    "ticket": "ticket", "gate": "diagnostic", "burn_in": "diagnostic", "rest": "rest", "person": "node.reason",
    "slurm": "node.reason", "window": "window", "repair": "diagnostic",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ResumeBlocker:
    """One thing that keeps a node drained: `code` and its parameters; `msg` is the English the API
    and the records use, `text()` the reader's language (pages)."""

    code: str
    params: dict

    @property
    def loc(self) -> str:
        return _BLOCKER_LOCS[self.code]

    def said(self) -> Said:
        return messages.BLOCKERS[self.code](**self.params)

    @property
    def msg(self) -> str:
        return str(self.said())

    def text(self) -> str:
        return shown(self.said().stored(), self.msg)


class _NodeKeptDrained(Conflict):
    """A 409 that keeps a node as it is; `blockers` say why, one detail entry each."""

    def __init__(self, node: str, blockers: list[ResumeBlocker], message: str):
        super().__init__(message, problems=[(b.loc, b.msg) for b in blockers])
        self.node = node
        self.blockers = blockers


class ResumeRefused(_NodeKeptDrained):
    """The portal keeps the node drained (HTTP 409)."""

    def __init__(self, node: str, blockers: list[ResumeBlocker]):
        why = "; ".join(b.msg for b in blockers)
        super().__init__(node, blockers, f"Slurm node {node} stays drained: {why} (an admin may force the resume)")


class RestRefused(_NodeKeptDrained):
    """No rest on a node that a person drained (HTTP 409)."""

    def __init__(self, node: str, blockers: list[ResumeBlocker]):
        why = "; ".join(b.msg for b in blockers)
        super().__init__(
            node, blockers,
            f"Slurm node {node} is drained for another reason: {why}; no rest is asked, the drain stays as it is",
        )  # fmt: skip


class DrainRefused(Conflict):
    """A drain by hand would replace the reason of someone else's drain (HTTP 409): the portal's own
    drain by hand may be ended by hand, so taking over that reason would end the other one too."""

    def __init__(self, node: str, blockers: list[ResumeBlocker]):
        why = "; ".join(b.msg for b in blockers)
        super().__init__(
            f"Slurm node {node} is already drained for another reason: {why}; its reason stays as it is",
            problems=[(b.loc, b.msg) for b in blockers],
        )
        self.node = node
        self.blockers = blockers


def scheduler_resume_blockers(*, host_id: int, node: Node | None, by_hand: bool) -> list[ResumeBlocker]:
    """Why the node of host `host_id` must not be resumed now; [] when it may. The one rule for
    every resume the portal makes, a ticket's, a rest's or a person's:

    - an open ticket of SLURM_DRAIN_SEVERITY or worse on the host (it drained the node, or will);
    - a resolved one that drained it, whose diagnostic has not passed (`_gate_pending_tickets`);
    - a GPU of the host whose burn-in has not passed, while BURN_IN_LEVEL is on;
    - a rest for the GPUs that is not over (its own resume is still to come);
    - a maintenance window under way on the host (`hooks.window_holds`; its own resume comes at its end);
    - a Slurm reason that the portal did not set (`is_portal_reason`): a person's drain
      (or Slurm's own reason for a down node) is never undone by the portal. A resume by hand may
      end a drain made by hand through the portal: the reason of the latest drain the portal
      carried out, when that was a person's, is the portal's.

    `node`: Slurm's answer, None when it did not answer (the reason is then checked when the
    action is carried out). A forced resume by an admin goes past all of them."""
    tickets = _draining_tickets(host_id).order_by("id").values_list("pk", flat=True)
    blockers = [ResumeBlocker("ticket", {"ticket": pk}) for pk in tickets]
    blockers += [ResumeBlocker("gate", {"ticket": pk}) for pk in _gate_pending_tickets(host_id)]
    if waiting := _burn_in_waiting(host_id):
        blockers.append(ResumeBlocker("burn_in", {"gpus": gpus_named(waiting)}))
    blockers += [ResumeBlocker("window", {"window": pk}) for pk, _title in hooks.window_holds.ask(host_id=host_id)]
    now = timezone.now()
    rests = Action.objects.filter(
        host_id=host_id, source=Action.Source.REST, kind=Action.Kind.RESUME, state=Action.State.PENDING,
        not_before__gt=now,
    ).order_by("not_before", "id")  # fmt: skip
    for rest in rests:
        until = timezone.localtime(rest.not_before, dt.UTC).strftime("%Y-%m-%d %H:%M")
        blockers.append(ResumeBlocker("rest", {"ticket": rest.ticket_id, "until": until}))
    # Held for a reason that is not the portal's (a drain without any reason counts as a person's).
    held = node is not None and bool(node.reason or "drain" in node.state)
    foreign = held and not is_portal_reason(node.reason)
    if foreign and not (by_hand and node.reason and node.reason == _hand_drain_reason(host_id)):
        code = "person" if "drain" in node.state else "slurm"
        blockers.append(ResumeBlocker(code, {"reason": node.reason or "no reason"}))
    return blockers


def _gate_pending_tickets(host_id: int) -> list[int]:
    """Resolved (or closed) draining tickets of the host that drained its node, or found it drained
    already, and whose diagnostic has not passed since they opened, unless the node was resumed
    since their latest drain (the ticket's own resume, or a person's forced one, which said so)."""
    severities = [s for s in SEVERITY_RANK if _drains(s)]
    latest_drain = (
        Action.objects.filter(ticket=OuterRef("pk"), kind=Action.Kind.DRAIN)
        .order_by("-created_at")
        .values("created_at")
    )
    resumed_since = Action.objects.filter(
        host_id=host_id, kind=Action.Kind.RESUME, state=Action.State.DONE, done_at__gte=OuterRef("drained_at")
    )
    tickets = (
        maintenance_selectors.tickets()
        .filter(host_id=host_id, state__in=[TicketState.RESOLVED, TicketState.CLOSED], severity__in=severities)
        .annotate(drained_at=Subquery(latest_drain[:1]))
        .filter(drained_at__isnull=False)
        .exclude(Exists(resumed_since))
        .order_by("id")
    )
    return [ticket.pk for ticket in tickets if not diagnostics.ticket_gate_passed(ticket)]


def _burn_in_waiting(host_id: int) -> list[Gpu]:
    if not settings.BURN_IN_LEVEL:
        return []
    return list(diagnostics_selectors.burn_in_waiting(host_id=host_id))


def _hand_drain_reason(host_id: int) -> str | None:
    """The reason of the latest drain the portal carried out on the host, when a person asked it."""
    last = (
        Action.objects.filter(host_id=host_id, kind=Action.Kind.DRAIN, state=Action.State.DONE)
        .order_by("-done_at", "-id")
        .only("source", "reason")
        .first()
    )
    return last.reason if last is not None and last.source == Action.Source.PERSON else None


def _action_add(
    *, host: Host, kind: str, source: str, reason: str = "", ticket=None, user=None, not_before=None, forced=False
):
    return Action.objects.create(
        host=host, node=node_name(host), kind=kind, source=source, reason=clean_reason(reason), ticket=ticket,
        requested_by=user, not_before=not_before or timezone.now(), forced=forced,
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
        for ticket in maintenance_selectors.tickets()
        .filter(
            host_id=diagnostic.host_id, state__in=[TicketState.RESOLVED, TicketState.CLOSED], resolved_at__gte=recent
        )
        .order_by("-resolved_at")
        if _drains(ticket.severity)
        and Action.objects.filter(ticket=ticket, kind=Action.Kind.DRAIN).exists()
        and not Action.objects.filter(ticket=ticket, kind=Action.Kind.RESUME, source=Action.Source.TICKET).exists()
        and diagnostics.ticket_gate_passed(ticket)
    ]
    burn_in_over = _burn_in_resume_due(diagnostic.host_id)
    if not waiting and not burn_in_over:
        return False
    with transaction.atomic():
        if waiting:
            _action_add(host=waiting[0].host, kind=Action.Kind.RESUME, source=Action.Source.TICKET, ticket=waiting[0])
        if burn_in_over:
            _action_add(host=diagnostic.host, kind=Action.Kind.RESUME, source=Action.Source.BURN_IN)
    return True


def _burn_in_resume_due(host_id: int) -> bool:
    """The host's latest burn-in drain has no resume after it, and no GPU of the host waits for its
    burn-in any more."""
    latest = Action.objects.filter(host_id=host_id, source=Action.Source.BURN_IN).order_by("-id").only("kind").first()
    return latest is not None and latest.kind == Action.Kind.DRAIN and not _burn_in_waiting(host_id)


def scheduler_burn_in_requested(*, diagnostic) -> bool:
    """A burn-in was requested for new GPUs (portal.diagnostics' hook, through portal.scheduler.enqueue):
    with BURN_IN_LEVEL on, the host's node is drained until it passes (`gpu-fleet burn-in: <GPUs>`),
    so that a new or swapped-in card takes no job before it proved itself. Returns whether it wrote
    an action."""
    if not scheduler_enabled() or not settings.BURN_IN_LEVEL:
        return False
    waiting = _burn_in_waiting(diagnostic.host_id)
    if not waiting:
        return False
    with transaction.atomic():
        _action_add(
            host=diagnostic.host, kind=Action.Kind.DRAIN, source=Action.Source.BURN_IN, reason=burn_in_reason(waiting)
        )
    return True


def window_drain_reason(*, window_id: int, title: str) -> str:
    return clean_reason(f"{WINDOW_PREFIX}{window_id}: {title}")


def scheduler_window_actions(*, hosts: list[Host], kind: str, reason: str = "", user=None) -> list[SchedulerAction]:
    """A maintenance window (portal.windows) starts (drain, `reason` from `window_drain_reason`) or
    ends (resume) on these hosts: one action each, carried out like a ticket's. A node drained
    already keeps its reason; the resume follows `scheduler_resume_blockers` (a person's drain, an
    open ticket, a diagnostic still to pass keep the node drained). No-op with Slurm off."""
    if not scheduler_enabled():
        return []
    with transaction.atomic():
        return [
            _action_add(host=host, kind=kind, source=Action.Source.WINDOW, reason=reason, user=user) for host in hosts
        ]


def scheduler_rest_request(
    *, ticket: Ticket, hours: int, user, adapter: SchedulerAdapter | None = None
) -> list[SchedulerAction]:
    """ "Give the GPUs rest": drain the ticket's host after its current jobs for `hours`, then
    resume it by itself (a second action, due when the time is up). A node that a person drained
    is refused now (Conflict) when Slurm answers, and skipped when the drain is carried out
    otherwise: the rest never takes over a person's drain, nor its end."""
    if not scheduler_enabled():
        raise NotFound("Slurm is not enabled (SLURM_MODE)")
    if not isinstance(hours, int) or not 1 <= hours <= REST_HOURS_MAX:
        raise InvalidInput("bad hours", field_errors={"hours": [f"a whole number of hours, 1 to {REST_HOURS_MAX}"]})
    name = node_name(ticket.host)
    with contextlib.suppress(SchedulerUnavailable):
        node = (adapter or scheduler_adapter()).node(name)
        if _drained_by_someone_else(node):
            raise RestRefused(name, [ResumeBlocker("person", {"reason": node.reason})])
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
        ticket_history_add(ticket=ticket, user=user, note=messages.REST_ASKED(node=drain.node, hours=hours))
    return [drain, resume]


def _drained_by_someone_else(node: Node) -> bool:
    return "drain" in node.state and not is_portal_reason(node.reason)


def _drain_by_hand_blockers(host_id: int, node: Node) -> list[ResumeBlocker]:
    """A drain by hand over a drain made outside the portal (not the portal's own drain by hand)."""
    if _drained_by_someone_else(node) and not (node.reason and node.reason == _hand_drain_reason(host_id)):
        return [ResumeBlocker("person", {"reason": node.reason or "no reason"})]
    return []


def scheduler_manual_action(
    *, host: Host, kind: str, reason: str, user, force: bool = False, adapter: SchedulerAdapter | None = None
) -> SchedulerAction:
    """A person drains or resumes a node by hand (a maintenance window), done at once; when Slurm
    does not answer the action stays pending (the sweep retries it) and SchedulerUnavailable says why.

    A resume is refused (ResumeRefused, 409) while `scheduler_resume_blockers` names anything, unless
    an admin (`scheduler.force_resume`) forces it with a reason: the action is then marked `forced`
    (the audit trail shows it) and its outcome and the open tickets' history say what it overrode."""
    if not scheduler_enabled():
        raise NotFound("Slurm is not enabled (SLURM_MODE)")
    reason = clean_reason(reason or "")
    if force:
        if kind != Action.Kind.RESUME:
            raise InvalidInput("only a resume can be forced", field_errors={"force": ["only a resume can be forced"]})
        if not user.has_perm("scheduler.force_resume"):
            _resume_refused(host=host, user=user, reason=reason, outcome=messages.FORCE_REFUSED(node=node_name(host)))
            raise Forbidden(
                "only admins may force a resume (scheduler.force_resume)",
                problems=[("force", "only admins may force a resume")],
            )
        if not reason:
            raise InvalidInput(
                "a forced resume needs a reason",
                field_errors={"reason": ["say why the node goes back to work although the portal keeps it drained"]},
            )
    if kind == Action.Kind.DRAIN and not reason:
        raise InvalidInput("a drain needs a reason", field_errors={"reason": ["say why the node is drained"]})
    adapter = adapter or scheduler_adapter()
    name = node_name(host)
    # A node Slurm does not know is refused before anything is written; a Slurm that does not
    # answer gets the action queued (503 now, done by the sweep later, which checks again).
    node = None
    with contextlib.suppress(SchedulerUnavailable):
        node = adapter.node(name)
    if kind == Action.Kind.RESUME and not force:
        blockers = scheduler_resume_blockers(host_id=host.pk, node=node, by_hand=True)
        if blockers:
            why = [b.said() for b in blockers]
            _resume_refused(host=host, user=user, reason=reason, outcome=messages.REFUSED_BY_HAND(node=name, why=why))
            raise ResumeRefused(name, blockers)
    if kind == Action.Kind.DRAIN and node is not None and (blockers := _drain_by_hand_blockers(host.pk, node)):
        raise DrainRefused(name, blockers)
    action = _action_add(host=host, kind=kind, source=Action.Source.PERSON, reason=reason, user=user, forced=force)
    scheduler_host_actions_run(host_id=host.pk, adapter=adapter)
    action.refresh_from_db()
    if action.state == Action.State.PENDING:
        raise SchedulerUnavailable(
            f"Slurm could not be reached: {action.last_error}", problems=[("slurm", action.last_error)]
        )
    if action.state == Action.State.FAILED:
        raise NodeUnknown(action.last_error, problems=[("hostname", action.last_error)])
    if action.state == Action.State.SKIPPED and kind == Action.Kind.DRAIN:  # someone drained it meanwhile
        raise DrainRefused(name, _drain_by_hand_blockers(host.pk, adapter.node(name)))
    if action.state == Action.State.SKIPPED:  # something came to keep it drained since the check above
        raise ResumeRefused(name, scheduler_resume_blockers(host_id=host.pk, node=adapter.node(name), by_hand=True))
    return action


def _resume_refused(*, host: Host, user, reason: str, outcome: Said) -> None:
    """A refused resume by hand stays in the audit trail as a row that was never carried out: who
    asked, when, and what kept the node drained."""
    text, stored = text_and_stored(outcome)
    now = timezone.now()
    Action.objects.create(
        host=host, node=node_name(host), kind=Action.Kind.RESUME, source=Action.Source.PERSON, reason=reason,
        requested_by=user, state=Action.State.SKIPPED, outcome=text, outcome_msg=stored, not_before=now, done_at=now,
    )  # fmt: skip


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


def _finish(action: SchedulerAction, state: str, outcome: Said) -> None:
    with transaction.atomic():
        action.state = state
        action.outcome, action.outcome_msg = text_and_stored(outcome)
        action.done_at = timezone.now()
        action.claimed_until = None
        action.save(update_fields=["state", "outcome", "outcome_msg", "done_at", "claimed_until", "attempts",
                                   "last_attempt_at"])  # fmt: skip
        if action.kind != Action.Kind.JOBS:
            node_status_forget(action.node)
        if action.ticket_id is not None:
            ticket_history_add(ticket=action.ticket, note=outcome, user=action.requested_by)


def _carry_out(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    if action.kind == Action.Kind.JOBS:
        return _record_job(action, adapter)
    if action.source == Action.Source.PERSON:
        if action.kind == Action.Kind.DRAIN:
            return _drain_by_hand(action, adapter)
        return _resume_by_hand(action, adapter)
    if action.kind == Action.Kind.DRAIN and action.source == Action.Source.BURN_IN:
        return _drain_for_burn_in(action, adapter)
    if action.kind == Action.Kind.DRAIN and action.source == Action.Source.WINDOW:
        return _drain_for_window(action, adapter)
    if action.kind == Action.Kind.DRAIN:
        return _drain_for_ticket(action, adapter)
    return _resume_for_ticket(action, adapter)


def _stays_drained(action: SchedulerAction, blockers: list[ResumeBlocker]) -> None:
    why = [b.said() for b in blockers]
    return _finish(action, Action.State.SKIPPED, messages.STAYS_DRAINED(node=action.node, why=why))


def _drain_by_hand(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    # Checked again here: someone may have drained the node since (Slurm did not answer then).
    blockers = _drain_by_hand_blockers(action.host_id, adapter.node(action.node))
    if blockers:
        why = [b.said() for b in blockers]
        return _finish(action, Action.State.SKIPPED, messages.ALREADY_DRAINED_BY_HAND(node=action.node, why=why))
    adapter.drain(action.node, action.reason)
    return _finish(action, Action.State.DONE, messages.DRAINED_BY_HAND(node=action.node, reason=action.reason))


def _resume_by_hand(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    # Checked again here: the action may run later than it was asked (Slurm did not answer then).
    blockers = scheduler_resume_blockers(host_id=action.host_id, node=adapter.node(action.node), by_hand=True)
    if blockers and not action.forced:
        return _stays_drained(action, blockers)
    adapter.resume(action.node)
    node, note = action.node, action.reason
    if not blockers:
        done = messages.RESUMED_BY_HAND_NOTE(node=node, note=note) if note else messages.RESUMED_BY_HAND(node=node)
        return _finish(action, Action.State.DONE, done)
    overridden = [b.said() for b in blockers]
    with transaction.atomic():
        # The rests this resume cut short end here: their own resume would otherwise lift a later drain.
        for rest in Action.objects.filter(
            host_id=action.host_id, source=Action.Source.REST, kind=Action.Kind.RESUME, state=Action.State.PENDING,
            not_before__gt=timezone.now(),
        ):  # fmt: skip
            _finish(rest, Action.State.SKIPPED, messages.REST_CUT_SHORT(node=node))
        tickets = maintenance_selectors.tickets().filter(
            pk__in=[b.params["ticket"] for b in blockers if b.code in ("ticket", "gate")]
        )
        gate = {b.params["ticket"] for b in blockers if b.code == "gate"}
        for ticket in tickets:
            if ticket.pk in gate:
                forced = (messages.FORCED_ON_GATE_NOTE(node=node, note=note) if note
                          else messages.FORCED_ON_GATE(node=node))  # fmt: skip
            else:
                forced = (messages.FORCED_ON_TICKET_NOTE(node=node, note=note) if note
                          else messages.FORCED_ON_TICKET(node=node))  # fmt: skip
            ticket_history_add(ticket=ticket, user=action.requested_by, note=forced)
        done = (messages.FORCED_NOTE(node=node, why=overridden, note=note) if note
                else messages.FORCED(node=node, why=overridden))  # fmt: skip
        _finish(action, Action.State.DONE, done)


def _drain_for_ticket(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    ticket = action.ticket
    if action.source == Action.Source.TICKET and (ticket is None or not ticket.is_open):
        return _finish(action, Action.State.SKIPPED, messages.RESOLVED_FIRST())
    node = adapter.node(action.node)
    if "drain" in node.state and action.source == Action.Source.TICKET:
        was = (messages.WAS_DRAINED(node=action.node, reason=node.reason) if node.reason
               else messages.WAS_DRAINED_NO_REASON(node=action.node))  # fmt: skip
        return _finish(action, Action.State.SKIPPED, was)
    if action.source == Action.Source.REST and _drained_by_someone_else(node):
        # Neither the reason nor the end of a person's drain is the rest's to change.
        with transaction.atomic():
            _rest_resume_cancel(action, messages.NO_REST_PERSON(node=action.node, reason=node.reason))
            return _finish(
                action, Action.State.SKIPPED, messages.NO_REST_OTHER_REASON(node=action.node, reason=node.reason)
            )
    if action.source == Action.Source.REST and "drain" in node.state:
        return _finish(
            action, Action.State.SKIPPED, messages.REST_ON_PORTAL_DRAIN(node=action.node, reason=node.reason)
        )
    adapter.drain(action.node, action.reason)
    return _finish(action, Action.State.DONE, messages.DRAINED(node=action.node, reason=action.reason))


def _drain_for_burn_in(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    """Drained until the burn-in passes (the burn-in keeps any other drain from ending:
    `scheduler_resume_blockers`)."""
    return _drain_while(
        action, adapter, holds=_burn_in_waiting(action.host_id),
        over_first=messages.BURN_IN_PASSED_FIRST, drained=messages.BURN_IN_DRAINED,
    )  # fmt: skip


def _drain_for_window(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    """Drained while a window is under way on the host (the window keeps any other drain from
    ending: `scheduler_resume_blockers`)."""
    return _drain_while(
        action, adapter, holds=hooks.window_holds.ask(host_id=action.host_id),
        over_first=messages.WINDOW_OVER_FIRST, drained=messages.WINDOW_DRAINED,
    )  # fmt: skip


def _drain_while(action: SchedulerAction, adapter: SchedulerAdapter, *, holds: bool, over_first, drained) -> None:
    """The node drained for as long as something holds it (a burn-in, a window): skipped when it
    no longer holds; a node drained already keeps its reason (a person's stays theirs)."""
    if not holds:
        return _finish(action, Action.State.SKIPPED, over_first(node=action.node))
    node = adapter.node(action.node)
    if "drain" in node.state:
        was = (messages.WAS_DRAINED(node=action.node, reason=node.reason) if node.reason
               else messages.WAS_DRAINED_NO_REASON(node=action.node))  # fmt: skip
        return _finish(action, Action.State.SKIPPED, was)
    adapter.drain(action.node, action.reason)
    return _finish(action, Action.State.DONE, drained(node=action.node, reason=action.reason))


def _rest_resume_cancel(drain: SchedulerAction, outcome: Said) -> None:
    """The resume asked with a rest's drain (the next rest resume of its ticket) is not done."""
    resume = (
        Action.objects.filter(
            host_id=drain.host_id,
            ticket_id=drain.ticket_id,
            source=Action.Source.REST,
            kind=Action.Kind.RESUME,
            state=Action.State.PENDING,
            id__gt=drain.id,
        )
        .order_by("id")
        .first()
    )
    if resume is not None:
        resume.requested_by = None  # the outcome goes to the ticket's history as the portal's note
        _finish(resume, Action.State.SKIPPED, outcome)


def _repair_blockers(host_id: int) -> list[ResumeBlocker]:
    """GPUs of the host out for repair that may not return to service yet (fleet's
    `return_to_service_gate`: no passed diagnostic since they left service): a maintenance window's
    end leaves their node drained, so that no job lands on a card taken out during the window."""
    waiting = []
    for gpu in fleet_selectors.gpus().filter(host_id=host_id, status=GpuStatus.OUT_FOR_REPAIR).order_by("index"):
        try:
            fleet_hooks.return_to_service_gate.ask(gpu=gpu)
        except Conflict:
            waiting.append(gpu)
    return [ResumeBlocker("repair", {"gpus": gpus_named(waiting)})] if waiting else []


def _resume_for_ticket(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    """A ticket's, a rest's, a burn-in's or a maintenance window's resume: only when nothing keeps
    the node drained (`scheduler_resume_blockers`; a window's end also waits for its GPUs out for
    repair, `_repair_blockers`)."""
    blockers = scheduler_resume_blockers(host_id=action.host_id, node=None, by_hand=False)
    if action.source == Action.Source.WINDOW:
        blockers += _repair_blockers(action.host_id)
    if blockers:
        return _stays_drained(action, blockers)
    node = adapter.node(action.node)
    if "drain" not in node.state:
        return _finish(action, Action.State.SKIPPED, messages.NOT_DRAINED(node=action.node, state=node.state))
    blockers = scheduler_resume_blockers(host_id=action.host_id, node=node, by_hand=False)
    if blockers:
        return _stays_drained(action, blockers)
    adapter.resume(action.node)
    resumed = {
        Action.Source.REST: messages.RESUMED_REST_OVER, Action.Source.BURN_IN: messages.RESUMED_BURN_IN,
        Action.Source.WINDOW: messages.RESUMED_WINDOW_OVER,
    }  # fmt: skip
    return _finish(action, Action.State.DONE, resumed.get(action.source, messages.RESUMED_NO_TICKET)(node=action.node))


def _record_job(action: SchedulerAction, adapter: SchedulerAdapter) -> None:
    ticket = action.ticket
    if ticket is None or ticket.gpu is None:
        return _finish(action, Action.State.SKIPPED, messages.NO_GPU())
    index = ticket.gpu.index
    jobs = [job for job in adapter.jobs(action.node) if index in job.gpus]
    if not jobs:
        return _finish(action, Action.State.DONE, messages.NO_JOB(index=index))
    described = [messages.JOB(id=j.id, name=j.name, user=j.user) for j in jobs]
    return _finish(action, Action.State.DONE, messages.JOBS(index=index, jobs=described))
