"""Planned maintenance windows over the API (/api/v1/maintenance-windows), as
shared/protocol/portal-api-v1.md says: viewers read, technicians and admins create, complete and
cancel."""

import datetime as dt
from typing import Literal

from ninja import Field, Query, Router, Schema, Status
from ninja.pagination import paginate

from portal.core.api import ApiDateTime, ErrorOut, Pagination, require_perm
from portal.windows import enqueue, selectors, services

router = Router(tags=["maintenance windows"])

ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut}


class WindowIn(Schema):
    title: str
    starts_at: ApiDateTime
    ends_at: ApiDateTime
    hosts: list[str]
    checklist: str | None = Field(None, description="A checklist template's key; one run per host at the start.")
    notes: str = ""


class AffectedJobOut(Schema):
    job: str = Field(description="slurm:<job id>")
    user: str
    expected_end: dt.datetime | None = Field(description="start plus time limit; null: no time limit")
    name: str = ""
    node: str = ""


class WindowOut(Schema):
    id: int
    title: str
    state: Literal["scheduled", "active", "completed", "cancelled"]
    starts_at: dt.datetime
    ends_at: dt.datetime
    hosts: list[str]
    checklist: str | None
    reservation: str | None = Field(description="the Slurm reservation, once made (gpu-fleet-window-<id>)")
    reservation_state: str | None = Field(
        description="pending (to be made), made, deleting, deleted, not_needed; null with Slurm off"
    )
    reservation_error: str | None = Field(description="the last failure to reach Slurm about the reservation")
    affected_jobs: list[AffectedJobOut]
    runs: list[int]
    created_by: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    notes: str


class WindowFilter(Schema):
    state: Literal["scheduled", "active", "completed", "cancelled"] | None = None
    host: str | None = None


def _out(window_id: int) -> dict:
    return selectors.window_as_dict(selectors.window_get(window_id=window_id))


@router.post("/maintenance-windows", response={201: WindowOut, **ERRORS})
def window_create(request, payload: WindowIn):
    """400 naming the field (`ends_at` not after `starts_at`, `starts_at` more than 5 minutes in the
    past, longer than 7 days, an unknown host, `hosts.N`, an unknown template, `checklist`); 409
    naming `hosts` when one of them has a scheduled or active window that overlaps. With Slurm on,
    the reservation is asked at once; Slurm not answering never fails the request (the window
    shows the failure, and the portal tries again every 30 s)."""
    require_perm(request, "windows.add_maintenancewindow")
    window = services.window_create(
        title=payload.title, starts_at=payload.starts_at, ends_at=payload.ends_at, hostnames=payload.hosts,
        checklist=payload.checklist, notes=payload.notes, user=request.user,
    )  # fmt: skip
    services.window_slurm_sync(window_id=window.pk)
    return Status(201, _out(window.pk))


@router.get("/maintenance-windows", response={200: list[WindowOut], 400: ErrorOut, 401: ErrorOut, 403: ErrorOut})
@paginate(Pagination)
def window_list(request, filters: Query[WindowFilter]):
    """Soonest first; filters `state` and `host` (a hostname)."""
    require_perm(request, "windows.view_maintenancewindow")
    return selectors.AsDicts(selectors.window_list(state=filters.state, host=filters.host))


@router.get("/maintenance-windows/{window_id}", response={200: WindowOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut})
def window_get(request, window_id: int):
    require_perm(request, "windows.view_maintenancewindow")
    return _out(window_id)


def _end(request, window_id: int, end) -> dict:
    require_perm(request, "windows.change_maintenancewindow")
    window, hosts = end(window=selectors.window_get(window_id=window_id), user=request.user)
    enqueue.host_actions(hosts)
    services.window_slurm_sync(window_id=window.pk)
    return _out(window.pk)


@router.post("/maintenance-windows/{window_id}/complete", response={200: WindowOut, **ERRORS})
def window_complete(request, window_id: int):
    """The reservation is deleted, the silences end, and the nodes the window drained are resumed by
    the scheduler's rules (never one a person drained meanwhile, never one holding a GPU whose
    diagnostic has yet to pass). 409 for a completed or cancelled window."""
    return _end(request, window_id, services.window_complete)


@router.post("/maintenance-windows/{window_id}/cancel", response={200: WindowOut, **ERRORS})
def window_cancel(request, window_id: int):
    """As complete, for a scheduled or active window, and its runs still in progress are abandoned.
    409 for a completed or cancelled window."""
    return _end(request, window_id, services.window_cancel)
