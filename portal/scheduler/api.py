"""/api/v1/hosts/{hostname}/scheduler: the host's Slurm node, drained or resumed by hand."""

import datetime as dt

from ninja import Router, Schema, Status

from portal.core.api import ErrorOut, error_body, require_perm
from portal.scheduler import selectors, services
from portal.scheduler.adapters import SchedulerUnavailable

router = Router(tags=["scheduler"])


class JobOut(Schema):
    id: int
    user: str
    name: str
    gpus: list[int]
    start: dt.datetime | None


class NodeOut(Schema):
    node: str
    state: str
    reason: str
    jobs: list[JobOut]


class DrainIn(Schema):
    reason: str


class ResumeIn(Schema):
    reason: str = ""
    force: bool = False


ANSWERS = {200: NodeOut, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 503: ErrorOut}


def _unavailable(error: SchedulerUnavailable):
    return Status(503, error_body(error.message, [{"loc": "slurm", "msg": error.message}]))


@router.get("/hosts/{hostname}/scheduler", response=ANSWERS)
def scheduler_node(request, hostname: str):
    """The node as Slurm said it at most 5 s ago (one answer per node serves every reader in that
    time); viewers and up, since it names the users and jobs running there."""
    require_perm(request, "scheduler.view_scheduleraction")
    host = selectors.scheduler_host_get(hostname=hostname)
    try:
        return Status(200, selectors.scheduler_node_status(host=host))
    except SchedulerUnavailable as error:
        return _unavailable(error)


def _act(request, hostname: str, kind: str, reason: str, force: bool = False):
    require_perm(request, "scheduler.add_scheduleraction")
    host = selectors.scheduler_host_get(hostname=hostname)
    try:
        services.scheduler_manual_action(host=host, kind=kind, reason=reason, user=request.user, force=force)
        return Status(200, selectors.scheduler_node_status(host=host, fresh=True))
    except SchedulerUnavailable as error:
        return _unavailable(error)


@router.post("/hosts/{hostname}/scheduler/drain", response={**ANSWERS, 409: ErrorOut})
def scheduler_drain(request, hostname: str, payload: DrainIn):
    """Drain the node now (running jobs finish); `reason` is required. 409 (`loc` `node.reason`) when
    someone drained it outside the portal: their reason stays."""
    return _act(request, hostname, "drain", payload.reason)


@router.post("/hosts/{hostname}/scheduler/resume", response={**ANSWERS, 409: ErrorOut})
def scheduler_resume(request, hostname: str, payload: ResumeIn | None = None):
    """Resume the node now. 409 while the portal keeps it drained (`detail`: each reason, `loc`
    `ticket`, `diagnostic` (a resolved ticket's or a burn-in's diagnostic not passed yet), `rest` or
    `node.reason`); `force` (admins only, 403 otherwise, with a `reason`) goes past them, and the
    audit trail and the tickets' history record it. A refused attempt stays in the audit trail."""
    payload = payload or ResumeIn()
    return _act(request, hostname, "resume", payload.reason, payload.force)
