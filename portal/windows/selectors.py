"""Functions that read maintenance windows: the list and one window (API and pages), the panels of
the fleet and host pages, the iCalendar feed, and what keeps a node drained (the scheduler asks)."""

from __future__ import annotations

import datetime as dt

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from portal.core.errors import NotFound
from portal.core.selectors import filter_given
from portal.windows.models import MaintenanceWindow, WindowHost

Window = MaintenanceWindow
PANEL_MAX = 20  # windows a fleet or host page lists at most (the windows page has them all)


def _shaped(queryset: QuerySet) -> QuerySet:
    rows = WindowHost.objects.select_related("host", "run").order_by("host__hostname")
    return queryset.select_related("checklist", "created_by").prefetch_related(
        Prefetch("window_hosts", queryset=rows, to_attr="rows")
    )


def window_list(*, state: str | None = None, host: str | None = None) -> QuerySet:
    """Soonest first; `host` a hostname."""
    windows = filter_given(Window.objects.all(), state=state)
    if host:
        windows = windows.filter(window_hosts__host__hostname=host)
    return _shaped(windows.order_by("starts_at", "id"))


class AsDicts:
    """A window queryset read as `window_as_dict`s one page at a time (the API's pagination slices
    it and counts it in SQL): a long history costs one page's rows, not every window's."""

    def __init__(self, windows: QuerySet):
        self.windows = windows

    def __len__(self) -> int:
        return self.windows.count()

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [window_as_dict(w) for w in self.windows[index]]
        return window_as_dict(self.windows[index])


def window_page_list(*, state: str | None = None, ended_max: int = 50) -> list[MaintenanceWindow]:
    """The windows page: one state, or the open windows (soonest first) and the latest ended ones."""
    if state:
        return list(window_list(state=state))
    opened = list(window_list().filter(state__in=Window.OPEN_STATES))
    ended = window_list().exclude(state__in=Window.OPEN_STATES).order_by("-starts_at", "-id")[:ended_max]
    return opened + list(ended)


def window_get(*, window_id: int) -> MaintenanceWindow:
    window = _shaped(Window.objects.filter(pk=window_id)).first()
    if window is None:
        raise NotFound(f"no maintenance window {window_id}")
    return window


def window_as_dict(window: MaintenanceWindow) -> dict:
    """A window as GET /api/v1/maintenance-windows/{id} shows it (`window_list`/`window_get` shape)."""
    rows = window.rows
    made = window.reservation_state in (Window.Reservation.MADE, Window.Reservation.DELETING)
    return {
        "id": window.pk,
        "title": window.title,
        "state": window.state,
        "starts_at": window.starts_at,
        "ends_at": window.ends_at,
        "hosts": [row.host.hostname for row in rows],
        "checklist": window.checklist.key if window.checklist else None,
        "reservation": window.reservation if made else None,
        "reservation_state": window.reservation_state or None,
        "reservation_error": window.reservation_error or None,
        "affected_jobs": list(window.affected_jobs or []),
        "runs": [row.run_id for row in rows if row.run_id is not None],
        "created_by": window.created_by.get_username(),
        "created_at": window.created_at,
        "started_at": window.started_at,
        "ended_at": window.ended_at,
        "notes": window.notes,
    }


def windows_open_panel(*, host_id: int | None = None) -> list[dict]:
    """Scheduled and active windows, soonest first, each with its hostnames: one query (the rows
    with their windows and hosts), whatever the fleet's size."""
    rows = WindowHost.objects.filter(window__state__in=Window.OPEN_STATES)
    if host_id is not None:
        rows = rows.filter(window__window_hosts__host_id=host_id)
    rows = rows.select_related("window", "host").order_by("window__starts_at", "window_id", "host__hostname")
    windows: dict[int, dict] = {}
    for row in rows[: PANEL_MAX * 50]:
        entry = windows.setdefault(row.window_id, {"window": row.window, "hosts": []})
        if row.host.hostname not in entry["hosts"]:
            entry["hosts"].append(row.host.hostname)
    return list(windows.values())[:PANEL_MAX]


def window_holds(*, host_id: int) -> list[tuple[int, str]]:
    """The scheduler's policy `window_holds`: active windows on the host, [(id, title)]."""
    found = Window.objects.filter(state=Window.State.ACTIVE, window_hosts__host_id=host_id).order_by("id")
    return list(found.values_list("pk", "title"))


def windows_for_feed() -> QuerySet:
    """The iCalendar feed: every window that is scheduled, under way, or ended in the last 90 days."""
    since = timezone.now() - dt.timedelta(days=90)
    windows = Window.objects.exclude(state__in=[Window.State.COMPLETED, Window.State.CANCELLED], ends_at__lt=since)
    return _shaped(windows.order_by("starts_at", "id"))


def window_host_rows(*, window: MaintenanceWindow) -> list[WindowHost]:
    """The window page's hosts, each with what the window did there (drain, resume, silence, run)."""
    rows = WindowHost.objects.filter(window=window).select_related("host", "drain", "resume", "silence", "run")
    return list(rows.order_by("host__hostname"))
