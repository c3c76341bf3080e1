"""/api/v1/tickets: list with filters, one ticket, state changes. Thin: parse, call, answer."""

import datetime as dt
from typing import Literal

from django.shortcuts import get_object_or_404
from ninja import Query, Router, Schema

from portal.core.api import require_perm
from portal.core.errors import InvalidInput
from portal.maintenance import hooks, selectors, services
from portal.maintenance.models import Ticket

router = Router(tags=["tickets"])


class TicketOut(Schema):
    id: int
    fingerprint: str
    rule: str
    title: str
    severity: str
    state: str
    host: str
    gpu_uuid: str | None
    occurrences: int
    first_seen: dt.datetime
    last_seen: dt.datetime
    peak_value: float | None
    auto_resolved: bool
    silenced: bool
    parent_id: int | None
    resolved_by_record_id: int | None
    action: str

    @staticmethod
    def resolve_host(obj):
        return obj.host.hostname

    @staticmethod
    def resolve_gpu_uuid(obj):
        return obj.gpu.uuid if obj.gpu_id else None


class TicketDetailOut(TicketOut):
    jobs: list[str] = []  # the job keys on its GPU when it opened (portal-api-v1.md, "Jobs on GPUs")


class TicketFilters(Schema):
    state: Literal["", "active", "open", "acknowledged", "in_progress", "resolved", "closed"] = ""
    severity: Literal["", "info", "warning", "critical"] = ""
    rule: str = ""
    host: str = ""
    sort: Literal["", *selectors.SORTS] = ""  # type: ignore[valid-type]
    limit: int = 100
    offset: int = 0


class StateChangeIn(Schema):
    state: Literal["acknowledged", "in_progress", "resolved", "closed", "open"]
    note: str = ""


@router.get("/tickets", response=list[TicketOut])
def tickets_list(request, filters: Query[TicketFilters]):
    require_perm(request, "maintenance.view_ticket")
    problems = []
    if not 1 <= filters.limit <= 1000:
        problems.append(("limit", "must be 1..1000"))
    if not 0 <= filters.offset <= 10**9:
        problems.append(("offset", "must be 0..10^9"))
    if problems:
        raise InvalidInput("limit must be 1..1000 and offset 0..10^9", problems=problems)
    args = filters.dict(exclude={"limit", "offset"})
    return list(selectors.ticket_list(**args)[filters.offset : filters.offset + filters.limit])


@router.get("/tickets/{ticket_id}", response=TicketDetailOut)
def ticket_get(request, ticket_id: int):
    require_perm(request, "maintenance.view_ticket")
    ticket = get_object_or_404(Ticket.objects.select_related("host", "gpu"), pk=ticket_id)
    ticket.jobs = hooks.ticket_jobs.ask(tickets=[ticket]).get(ticket.pk, [])
    return ticket


@router.post("/tickets/{ticket_id}/state", response=TicketOut)
def ticket_state_change(request, ticket_id: int, payload: StateChangeIn):
    require_perm(request, "maintenance.change_ticket")
    if payload.state == "closed":
        require_perm(request, "maintenance.close_ticket")
    ticket = get_object_or_404(Ticket.objects.select_related("host", "gpu"), pk=ticket_id)
    return services.ticket_transition(ticket=ticket, to_state=payload.state, user=request.user, note=payload.note)
