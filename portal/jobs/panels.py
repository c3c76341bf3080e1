"""What the jobs app adds to lower apps' pages (portal.core.panels): the GPU page's jobs, the
jobs a ticket's GPU held when it opened, and the jobs a search finds."""

from __future__ import annotations

from django.utils import timezone

from portal.core.panels import panel
from portal.jobs import selectors


def _may_see(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.has_perm("fleet.view_gpu"))


@panel("fleet.gpu", slot="main", name="jobs", template="jobs/_gpu_panel.html", order=5)
def gpu_jobs(*, gpu, request=None, **page) -> dict | None:
    if not _may_see(request):
        return None
    return selectors.gpu_jobs_panel(gpu_id=gpu.pk, now=timezone.now())


@panel("maintenance.ticket", slot="evidence", name="jobs", template="jobs/_ticket_panel.html", order=5)
def ticket_jobs(*, ticket, request=None, **page) -> dict | None:
    if ticket.gpu_id is None or not _may_see(request):
        return None
    jobs = selectors.tickets_jobs_shown(tickets=[ticket]).get(ticket.pk, [])
    return {"jobs": jobs} if jobs else None


@panel("fleet.search", slot="results", name="jobs", template="jobs/_search_jobs.html", order=15)
def search_jobs(*, request, query, limit, **page) -> dict | None:
    if not _may_see(request):
        return None
    return {"matches": selectors.jobs_search(query=query, limit=limit)}
