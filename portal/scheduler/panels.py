"""What the scheduler adds to the host page and a ticket's page (portal.core.panels)."""

from __future__ import annotations

from django.conf import settings

from portal.core.panels import panel
from portal.scheduler import selectors
from portal.scheduler.adapters import Node, NodeUnknown, SchedulerAdapter, SchedulerUnavailable
from portal.scheduler.services import (
    REST_HOURS_MAX,
    node_name,
    scheduler_adapter,
    scheduler_enabled,
    scheduler_resume_blockers,
)

PAGE_TIMEOUT_S = 3.0  # a page waits this long for Slurm at most, then says it did not answer


def _page_adapter() -> SchedulerAdapter:
    adapter = scheduler_adapter()  # a fresh one per page: its timeout is the page's own
    adapter.timeout = min(adapter.timeout, PAGE_TIMEOUT_S)
    return adapter


@panel("fleet.host", slot="main", name="scheduler", template="scheduler/_host_panel.html", order=10)
def host_page_panel(*, host, request=None, **context) -> dict | None:
    user = getattr(request, "user", None)
    if not scheduler_enabled() or not (user and user.has_perm("scheduler.view_scheduleraction")):
        return None
    status, error, unknown = None, "", False
    try:
        status = selectors.scheduler_node_status(host=host, adapter=_page_adapter())
    except NodeUnknown as exc:
        error, unknown = str(exc), True
    except SchedulerUnavailable as exc:
        error = str(exc)
    can_act = user.has_perm("scheduler.add_scheduleraction")
    blockers = []
    # What a resume by hand would be refused for, said in place of its button; nothing to say about
    # a node that is neither drained nor held for a reason (a resume would change nothing).
    held = status is None or "drain" in status["state"] or bool(status["reason"])
    if can_act and not unknown and held:
        node = Node(node=status["node"], state=status["state"], reason=status["reason"]) if status else None
        blockers = [b.text() for b in scheduler_resume_blockers(host_id=host.pk, node=node, by_hand=True)]
    return {
        "node": node_name(host),
        "status": status,
        "error": error,
        "unknown": unknown,
        "last_failure": selectors.scheduler_last_failure(host=host),
        "actions": selectors.scheduler_host_actions(host=host),
        "can_act": can_act,
        "resume_blockers": blockers,
        "can_force": can_act and user.has_perm("scheduler.force_resume"),
        "mode": settings.SLURM_MODE,
    }


@panel("maintenance.ticket", slot="work", name="scheduler", template="scheduler/_rest_offer.html")
def ticket_page_panel(*, ticket, request=None, **context) -> dict | None:
    """The no-rest rule's ticket offers to drain the node after its current jobs for some hours."""
    if not scheduler_enabled() or ticket.rule != "no_rest" or not ticket.is_open:
        return None
    user = getattr(request, "user", None)
    if not (user and user.has_perm("scheduler.add_scheduleraction")):
        return None
    return {"ticket": ticket, "node": node_name(ticket.host), "hours_max": REST_HOURS_MAX}
