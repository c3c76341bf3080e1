"""The ticket feed starts with the latest changes (the last 10, newest first), in the page's time
format, not an empty box beside the open tickets."""

import datetime as dt

from django.utils import timezone

from portal.maintenance.models import TicketEvent
from portal.maintenance.services.tickets import ticket_fire
from tests.factories import GpuFactory, HostFactory


def fire(rule: str, *, gpu):
    return ticket_fire(rule=rule, host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=90)[0]


def _items(html: str) -> list[str]:
    feed = html.split('id="ticket-feed"', 1)[1].split("</ul>", 1)[0]
    return [chunk.split('"', 1)[0] for chunk in feed.split('data-ticket-id="')[1:]]


def test_the_feed_starts_with_the_ten_latest_changes(client_for, viewer):
    host = HostFactory(hostname="dgx-feed")
    tickets = [fire("overheat", gpu=GpuFactory(host=host, index=index)) for index in range(12)]
    start = timezone.now() - dt.timedelta(hours=1)
    for minutes, ticket in enumerate(tickets):
        TicketEvent.objects.filter(ticket=ticket).update(at=start + dt.timedelta(minutes=minutes))
    for path in ("/", "/tickets/"):
        html = client_for(viewer).get(path).content.decode()
        assert _items(html) == [str(ticket.pk) for ticket in tickets[::-1][:10]], path
        stamp = timezone.localtime(start + dt.timedelta(minutes=11)).strftime("%Y-%m-%d %H:%M")
        assert f">{stamp}</time>" in html and "No ticket changes" not in html


def test_an_empty_feed_says_so(client_for, viewer):
    html = client_for(viewer).get("/").content.decode()
    assert _items(html) == [] and "No ticket changes yet." in html
