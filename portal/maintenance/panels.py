"""What maintenance adds to fleet's pages (portal.core.panels): the open tickets of a host or GPU."""

from portal.core.panels import panel
from portal.maintenance import selectors


@panel("fleet.host", slot="summary", name="open-tickets", template="maintenance/_open_tickets.html")
def host_tickets(*, host, **page) -> dict:
    return {"tickets": selectors.open_tickets_for(host=host)}


@panel("fleet.gpu", slot="main", name="open-tickets", template="maintenance/_open_tickets.html", order=20)
def gpu_tickets(*, gpu, **page) -> dict:
    return {"tickets": selectors.open_tickets_for(gpu=gpu)}
