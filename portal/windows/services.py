"""Functions that write maintenance windows: create, start (beat), complete, cancel, and the Slurm
side (the reservation, the jobs it would hit), retried until Slurm answers.

Every write is checked before anything is stored, in one transaction: a refused request writes
nothing (InvalidInput naming the field, Conflict naming `hosts` or `state`). Slurm is never asked
inside a request's transaction and never fails one: the reservation's state and its last failure
stay on the window and `windows_beat` tries again every 30 s. Drains and resumes are the
scheduler's actions (source `window`), carried out and retried like a ticket's, under the
scheduler's one rule for resumes (a person's drain and a GPU waiting for its diagnostic stay).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext

from portal.checklists import selectors as checklists_selectors
from portal.checklists import services as checklists
from portal.core.errors import ApplicationError, Conflict, InvalidInput
from portal.fleet import selectors as fleet_selectors
from portal.maintenance.services.silences import silence_create, silence_end_set
from portal.scheduler import services as scheduler
from portal.scheduler.adapters import RESERVATION_PREFIX, NodeUnknown, SchedulerAdapter, SchedulerUnavailable
from portal.windows.models import MaintenanceWindow, WindowHost

if TYPE_CHECKING:
    from portal.checklists.models import ChecklistRun, ChecklistTemplate
    from portal.fleet.models import Host

log = logging.getLogger(__name__)

Window = MaintenanceWindow
TITLE_MAX = 200
NOTES_MAX = 5000
HOSTS_MAX = 500
PAST_GRACE = dt.timedelta(minutes=5)  # a start this far in the past is "now" typed slowly
LONGEST = dt.timedelta(days=7)
CLAIM_FOR = dt.timedelta(seconds=90)
JOBS_FRESH = dt.timedelta(minutes=5)  # how often the beat asks Slurm again about the jobs a window would hit
SILENCE_MARGIN = dt.timedelta(minutes=5)  # a window running over its end keeps its silence this far ahead
REQUEST_TIMEOUT_S = 3.0  # a request waits this long for Slurm at most; the beat goes on after


def reservation_name(window_id: int) -> str:
    return f"{RESERVATION_PREFIX}{window_id}"


# --- create -----------------------------------------------------------------------------------


def _check_times(starts_at, ends_at, now: dt.datetime) -> list[tuple[str, str]]:
    problems = []
    for field, value in (("starts_at", starts_at), ("ends_at", ends_at)):
        if not isinstance(value, dt.datetime) or value.tzinfo is None:
            problems.append((field, gettext("A time with its zone (RFC 3339), e.g. 2026-12-14T08:00:00+00:00.")))
    if problems:
        return problems
    if starts_at < now - PAST_GRACE:
        problems.append(("starts_at", gettext("The start lies in the past (more than 5 minutes ago).")))
    if ends_at <= starts_at:
        problems.append(("ends_at", gettext("The end must be after the start.")))
    elif ends_at - starts_at > LONGEST:
        problems.append(("ends_at", gettext("A window lasts at most 7 days.")))
    return problems


def _check_hosts(hostnames) -> tuple[list[Host], list[tuple[str, str]]]:
    if not isinstance(hostnames, list) or not hostnames:
        return [], [("hosts", gettext("Name at least one host."))]
    if len(hostnames) > HOSTS_MAX:
        return [], [("hosts", gettext("At most %(n)s hosts in one window.") % {"n": HOSTS_MAX})]
    known = {
        h.hostname: h for h in fleet_selectors.hosts().filter(hostname__in=[n for n in hostnames if isinstance(n, str)])
    }
    hosts, problems = [], []
    for n, name in enumerate(hostnames):
        host = known.get(name) if isinstance(name, str) else None
        if host is None:
            problems.append((f"hosts.{n}", gettext("No host named %(name)r.") % {"name": name}))
        elif host not in hosts:
            hosts.append(host)
    return hosts, problems


def _check_checklist(key) -> tuple[ChecklistTemplate | None, list[tuple[str, str]]]:
    if key in (None, ""):
        return None, []
    template = checklists_selectors.templates().filter(key=key).first() if isinstance(key, str) else None
    if template is None:
        return None, [("checklist", gettext("No checklist template %(key)r.") % {"key": key})]
    if not template.active:
        return None, [("checklist", gettext("This checklist template is no longer in use."))]
    return template, []


def window_overlaps(*, hosts: list[Host], starts_at: dt.datetime, ends_at: dt.datetime, exclude: int | None = None):
    """The scheduled or active windows on these hosts that overlap [starts_at, ends_at)."""
    found = Window.objects.filter(
        state__in=Window.OPEN_STATES, window_hosts__host__in=hosts, starts_at__lt=ends_at, ends_at__gt=starts_at
    )
    if exclude is not None:
        found = found.exclude(pk=exclude)
    return found.distinct().order_by("starts_at", "id")


def window_create(
    *, title, starts_at, ends_at, hostnames, checklist=None, notes="", user, now: dt.datetime | None = None
) -> MaintenanceWindow:
    """A scheduled window (400 naming the field; 409 naming `hosts` when one of them has a scheduled
    or active window that overlaps). With Slurm on, its reservation is to be made (`window_slurm_sync`)."""
    now = now or timezone.now()
    title = title.strip() if isinstance(title, str) else ""
    notes = notes.strip() if isinstance(notes, str) else ""
    problems = []
    if not title:
        problems.append(("title", gettext("Give the window a title.")))
    elif len(title) > TITLE_MAX:
        problems.append(("title", gettext("At most %(n)s characters.") % {"n": TITLE_MAX}))
    problems += _check_times(starts_at, ends_at, now)
    hosts, host_problems = _check_hosts(hostnames)
    template, template_problems = _check_checklist(checklist)
    problems += host_problems + template_problems
    if len(notes) > NOTES_MAX:
        problems.append(("notes", gettext("At most %(n)s characters.") % {"n": NOTES_MAX}))
    if problems:
        raise InvalidInput("invalid maintenance window", problems=problems)
    with transaction.atomic():
        # Two windows asked at once for one host: the host rows are locked, so one sees the other.
        list(fleet_selectors.hosts().select_for_update().filter(pk__in=[h.pk for h in hosts]).order_by("pk"))
        clashes = list(window_overlaps(hosts=hosts, starts_at=starts_at, ends_at=ends_at).prefetch_related("hosts"))
        if clashes:
            raise Conflict(
                "a host already has a window at that time",
                problems=[("hosts", _clash_text(clash, hosts)) for clash in clashes],
            )
        window = Window.objects.create(
            title=title, starts_at=starts_at, ends_at=ends_at, checklist=template, notes=notes, created_by=user,
            reservation_state=Window.Reservation.PENDING if scheduler.scheduler_enabled() else "",
        )  # fmt: skip
        if scheduler.scheduler_enabled():
            window.reservation = reservation_name(window.pk)
            window.save(update_fields=["reservation"])
        WindowHost.objects.bulk_create([WindowHost(window=window, host=host) for host in hosts])
    return window


def _clash_text(clash: MaintenanceWindow, hosts: list[Host]) -> str:
    names = sorted({h.hostname for h in clash.hosts.all()} & {h.hostname for h in hosts})
    start, end = (timezone.localtime(t, dt.UTC).strftime("%Y-%m-%d %H:%M") for t in (clash.starts_at, clash.ends_at))
    return gettext("%(hosts)s: window #%(id)s (%(title)s) is %(state)s, %(start)s to %(end)s UTC.") % {
        "hosts": ", ".join(names), "id": clash.pk, "title": clash.title, "state": clash.get_state_display(),
        "start": start, "end": end,
    }  # fmt: skip


# --- start (the beat) -------------------------------------------------------------------------


@dataclasses.dataclass
class Started:
    window: MaintenanceWindow
    drained: list[int]  # host ids whose actions are to be carried out


def window_start(*, window_id: int, now: dt.datetime | None = None) -> Started | None:
    """Start one due window: claimed with a conditional UPDATE (scheduled → active), so two beats
    never start it twice; then, in the same transaction, each host's silence, checklist run and
    drain. None when another beat had it (or it is not due)."""
    now = now or timezone.now()
    with transaction.atomic():
        claimed = Window.objects.filter(pk=window_id, state=Window.State.SCHEDULED, starts_at__lte=now).update(
            state=Window.State.ACTIVE, started_at=now
        )
        if not claimed:
            return None
        window = Window.objects.select_related("checklist", "created_by").get(pk=window_id)
        rows = list(window.window_hosts.select_related("host").order_by("host__hostname"))
        comment = f"maintenance window #{window.pk}: {window.title}"
        for row in rows:
            row.silence = silence_create(
                host=row.host, starts_at=now, ends_at=max(window.ends_at, now + SILENCE_MARGIN), comment=comment,
                user=window.created_by,
            )  # fmt: skip
            row.run = _run_start(window, row.host)
        reason = scheduler.window_drain_reason(window_id=window.pk, title=window.title)
        drains = scheduler.scheduler_window_actions(
            hosts=[row.host for row in rows], kind=scheduler.Action.Kind.DRAIN, reason=reason, user=window.created_by
        )
        for row, action in zip(rows, drains, strict=False):
            row.drain = action
        WindowHost.objects.bulk_update(rows, ["silence", "run", "drain"])
    return Started(window=window, drained=[action.host_id for action in drains])


def _run_start(window: MaintenanceWindow, host: Host) -> ChecklistRun | None:
    """The window's checklist on one host; a host it cannot run on (a GPU checklist on a host
    without GPUs) gets none, and the window still starts."""
    if window.checklist is None:
        return None
    try:
        with transaction.atomic():
            return checklists.run_start(
                template_key=window.checklist.key, hostname=host.hostname, gpu_uuids=None, user=window.created_by
            )
    except ApplicationError as error:
        log.warning("window %s: no %s run on %s: %s", window.pk, window.checklist.key, host.hostname, error)
        return None


def windows_start_due(*, now: dt.datetime | None = None) -> list[Started]:
    now = now or timezone.now()
    due = Window.objects.filter(state=Window.State.SCHEDULED, starts_at__lte=now).order_by("starts_at", "id")
    started = []
    for window_id in list(due.values_list("pk", flat=True)):
        if (done := window_start(window_id=window_id, now=now)) is not None:
            started.append(done)
    return started


# --- end: complete or cancel ------------------------------------------------------------------


def _window_end(*, window: MaintenanceWindow, state: str, user, now: dt.datetime) -> tuple[MaintenanceWindow, list]:
    with transaction.atomic():
        window = Window.objects.select_for_update().get(pk=window.pk)
        if not window.is_open:
            said = gettext("The window is %(state)s.") % {"state": window.get_state_display()}
            raise Conflict(f"this window is {window.state}", problems=[("state", said)])
        was_active = window.state == Window.State.ACTIVE
        window.state, window.ended_at, window.ended_by = state, now, user
        fields = ["state", "ended_at", "ended_by"]
        if window.reservation_state in (Window.Reservation.PENDING, Window.Reservation.MADE):
            window.reservation_state = Window.Reservation.DELETING
            window.reservation_claimed_until = None
            fields += ["reservation_state", "reservation_claimed_until"]
        window.save(update_fields=fields)
        rows = list(window.window_hosts.select_related("host", "silence", "run"))
        for row in rows:
            if row.silence is not None and row.silence.ends_at > now:
                silence_end_set(silence=row.silence, ends_at=now)
        if state == Window.State.CANCELLED:
            for row in rows:
                if row.run is not None and row.run.state == checklists_selectors.RunState.IN_PROGRESS:
                    checklists.run_abandon(run=row.run, reason=f"maintenance window #{window.pk} cancelled", user=user)
        resumed = []
        if was_active:
            resumed = scheduler.scheduler_window_actions(
                hosts=[row.host for row in rows], kind=scheduler.Action.Kind.RESUME, user=user
            )
            for row, action in zip(rows, resumed, strict=False):
                row.resume = action
            WindowHost.objects.bulk_update(rows, ["resume"])
    return window, [action.host_id for action in resumed]


def window_complete(*, window: MaintenanceWindow, user, now: dt.datetime | None = None):
    """Completed (by a person, or by the last of its runs signed off): the reservation is deleted,
    the silences end, the nodes are resumed by the scheduler's rules. Returns the window and the
    host ids whose actions are to be carried out. 409 for a completed or cancelled window."""
    return _window_end(window=window, state=Window.State.COMPLETED, user=user, now=now or timezone.now())


def window_cancel(*, window: MaintenanceWindow, user, now: dt.datetime | None = None):
    """As `window_complete`, and its runs still in progress are abandoned."""
    return _window_end(window=window, state=Window.State.CANCELLED, user=user, now=now or timezone.now())


def window_run_completed(*, run: ChecklistRun) -> tuple[MaintenanceWindow, list[int]] | None:
    """A checklist run was signed off: the last of an active window's runs completes the window.
    Returns it with the host ids whose actions are to be carried out; None when it goes on."""
    row = WindowHost.objects.filter(run=run, window__state=Window.State.ACTIVE).select_related("window").first()
    if row is None:
        return None
    still = WindowHost.objects.filter(window_id=row.window_id, run__state=checklists_selectors.RunState.IN_PROGRESS)
    if still.exists():
        return None
    try:
        return window_complete(window=row.window, user=run.completed_by)
    except Conflict:  # completed by hand meanwhile
        return None


# --- Slurm: the reservation and the jobs it would hit ------------------------------------------


def _claim_reservation(window_id: int, now: dt.datetime) -> MaintenanceWindow | None:
    claimed = (
        Window.objects.filter(
            pk=window_id, reservation_state__in=[Window.Reservation.PENDING, Window.Reservation.DELETING]
        )
        .filter(Q(reservation_claimed_until__isnull=True) | Q(reservation_claimed_until__lt=now))
        .update(reservation_claimed_until=now + CLAIM_FOR, reservation_attempted_at=now)
    )
    return Window.objects.get(pk=window_id) if claimed else None


def window_reservation_sync(*, window_id: int, adapter: SchedulerAdapter | None = None) -> bool:
    """Make or delete the window's reservation as its state asks; a failure stays on the window
    and the next beat tries again. Returns whether Slurm answered (or nothing was to be done)."""
    now = timezone.now()
    window = _claim_reservation(window_id, now)
    if window is None:
        return True
    adapter = adapter or scheduler.scheduler_adapter()
    deleting = window.reservation_state == Window.Reservation.DELETING
    name = window.reservation or reservation_name(window.pk)
    try:
        if deleting:
            adapter.reservation_delete(name)
            done = Window.Reservation.DELETED
        elif window.ends_at <= now:
            done = Window.Reservation.NOT_NEEDED
        else:
            nodes = [scheduler.node_name(h) for h in window.hosts.order_by("hostname")]
            adapter.reservation_create(name, nodes=nodes, start=max(window.starts_at, now), end=window.ends_at)
            done = Window.Reservation.MADE
    except (SchedulerUnavailable, NodeUnknown) as error:
        Window.objects.filter(pk=window.pk).update(
            reservation_error=str(error)[:1000], reservation_attempts=window.reservation_attempts + 1,
            reservation_claimed_until=None,
        )  # fmt: skip
        log.warning("Slurm reservation %s of window %s: %s", name, window.pk, error)
        return False
    # Conditional: a window ended while its reservation was being made stays "to be deleted".
    Window.objects.filter(pk=window.pk, reservation_state=window.reservation_state).update(
        reservation_state=done, reservation_error="", reservation_claimed_until=None,
        reservation_attempts=window.reservation_attempts + 1,
    )  # fmt: skip
    Window.objects.filter(pk=window.pk).update(reservation_claimed_until=None)
    return True


def window_affected_jobs_refresh(*, window_id: int, adapter: SchedulerAdapter | None = None) -> bool:
    """The jobs running on the window's nodes whose end (start plus time limit) falls after its
    start, or that have no limit. Kept as Slurm said them last; False when Slurm did not answer."""
    window = Window.objects.get(pk=window_id)
    if not scheduler.scheduler_enabled() or window.state != Window.State.SCHEDULED:
        return True
    adapter = adapter or scheduler.scheduler_adapter()
    found = []
    try:
        for host in window.hosts.order_by("hostname"):
            node = scheduler.node_name(host)
            for job in adapter.jobs(node):
                if job.end is None or job.end > window.starts_at:
                    found.append(
                        {
                            "job": f"slurm:{job.id}", "user": job.user, "name": job.name, "node": node,
                            "expected_end": job.end.isoformat() if job.end else None,
                        }
                    )  # fmt: skip
    except (SchedulerUnavailable, NodeUnknown) as error:
        log.info("jobs on window %s's nodes: %s", window.pk, error)
        return False
    Window.objects.filter(pk=window.pk).update(affected_jobs=found, affected_jobs_at=timezone.now())
    return True


def window_slurm_sync(*, window_id: int, adapter: SchedulerAdapter | None = None, timeout: float | None = None):
    """Right after a person's request (create, complete, cancel): one try at the reservation and the
    jobs, with a short timeout; never raises for Slurm (the beat goes on)."""
    if not scheduler.scheduler_enabled():
        return
    if adapter is None:
        adapter = scheduler.scheduler_adapter()
        adapter.timeout = min(adapter.timeout, timeout or REQUEST_TIMEOUT_S)
    if window_reservation_sync(window_id=window_id, adapter=adapter):
        window_affected_jobs_refresh(window_id=window_id, adapter=adapter)


def windows_beat(*, now: dt.datetime | None = None, adapter: SchedulerAdapter | None = None) -> list[int]:
    """Every 30 s: start the due windows, make or delete reservations still to be, refresh the
    affected jobs of scheduled windows, keep the silences of windows running over. Returns the
    host ids whose scheduler actions are to be carried out."""
    now = now or timezone.now()
    hosts = [host for started in windows_start_due(now=now) for host in started.drained]
    if scheduler.scheduler_enabled():
        adapter = adapter or scheduler.scheduler_adapter()
        waiting = Window.objects.filter(
            reservation_state__in=[Window.Reservation.PENDING, Window.Reservation.DELETING]
        ).filter(Q(reservation_claimed_until__isnull=True) | Q(reservation_claimed_until__lt=now))
        for window_id in list(waiting.values_list("pk", flat=True)):
            window_reservation_sync(window_id=window_id, adapter=adapter)
        stale = Window.objects.filter(state=Window.State.SCHEDULED).filter(
            Q(affected_jobs_at__isnull=True) | Q(affected_jobs_at__lt=now - JOBS_FRESH)
        )
        for window_id in list(stale.values_list("pk", flat=True)):
            window_affected_jobs_refresh(window_id=window_id, adapter=adapter)
    _silences_keep(now)
    return hosts


def _silences_keep(now: dt.datetime) -> None:
    """An active window past its planned end still holds its hosts' notifications."""
    rows = WindowHost.objects.filter(
        window__state=Window.State.ACTIVE, silence__ends_at__lt=now + SILENCE_MARGIN / 2
    ).select_related("silence")
    for row in rows:
        silence_end_set(silence=row.silence, ends_at=now + SILENCE_MARGIN)
