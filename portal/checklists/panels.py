"""What checklists add to other apps' pages (portal.core.panels): "Start checklist" on a host, a
GPU and a ticket that a checklist resolves; the runs a search finds."""

from portal.checklists import selectors
from portal.core.panels import panel

TEMPLATE = "checklists/_start_button.html"


def _may_start(request) -> bool:
    return request.user.has_perm("checklists.add_checklistrun")


@panel("fleet.host", slot="actions", name="start-checklist", template=TEMPLATE)
def host_start(*, request, host, **page) -> dict | None:
    return {"subject": "host", "value": host.hostname} if _may_start(request) else None


@panel("fleet.gpu", slot="actions", name="start-checklist", template=TEMPLATE)
def gpu_start(*, request, gpu, **page) -> dict | None:
    return {"subject": "gpu", "value": gpu.uuid} if _may_start(request) else None


@panel("maintenance.ticket", slot="actions", name="start-checklist", template=TEMPLATE)
def ticket_start(*, request, ticket, rule, **page) -> dict | None:
    if not (ticket.is_open and rule is not None and rule.resolved_by and _may_start(request)):
        return None
    return {"subject": "ticket", "value": ticket.pk, "primary": True}


@panel("fleet.search", slot="results", name="checklist-runs", template="checklists/_search_runs.html", order=20)
def search_runs(*, request, query, limit, **page) -> dict | None:
    if not request.user.has_perm("checklists.view_checklistrun"):
        return None
    return {"matches": selectors.runs_search(query=query, limit=limit)}
