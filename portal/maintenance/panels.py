"""What maintenance adds to fleet's pages (portal.core.panels): the open tickets of a host or GPU,
the tickets a search finds."""

from portal.core.panels import panel
from portal.maintenance import selectors


@panel("fleet.host", slot="summary", name="open-tickets", template="maintenance/_open_tickets.html")
def host_tickets(*, host, **page) -> dict:
    return {"tickets": selectors.open_tickets_for(host=host)}


@panel("fleet.gpu", slot="main", name="open-tickets", template="maintenance/_open_tickets.html", order=20)
def gpu_tickets(*, gpu, **page) -> dict:
    return {"tickets": selectors.open_tickets_for(gpu=gpu)}


@panel("fleet.search", slot="results", name="tickets", template="maintenance/_search_tickets.html", order=10)
def search_tickets(*, request, query, limit, **page) -> dict | None:
    if not request.user.has_perm("maintenance.view_ticket"):
        return None
    return {"matches": selectors.tickets_search(query=query, limit=limit)}
