"""What `live` adds to other apps' pages (portal.core.panels): the fleet page's tiles, heatmap and
ticket feed, the GPU page's charts, the ticket list's feed."""

from portal.core.panels import panel
from portal.live import selectors


@panel("fleet.fleet", slot="overview", name="live-tiles", template="live/_fleet_tiles.html", order=10)
def fleet_tiles(**page) -> dict:
    return {"ticket_counts": selectors.open_ticket_counts()}


@panel("fleet.fleet", slot="overview", name="live-heatmap", template="live/_fleet_heatmap.html", order=20)
def fleet_heatmap(**page) -> dict:
    return {}


@panel("fleet.fleet", slot="overview", name="live-ticket-feed", template="live/_ticket_feed.html", order=30)
@panel("maintenance.tickets", slot="feed", name="live-ticket-feed", template="live/_ticket_feed.html")
def ticket_feed(**page) -> dict:
    return {"items": selectors.ticket_feed_latest()}


@panel("fleet.gpu", slot="top", name="live-charts", template="live/_gpu_charts.html")
def gpu_charts(*, gpu, records, limits, **page) -> dict:
    return {"live_config": selectors.gpu_live_config(gpu=gpu, records=records, limits=limits)}


@panel("fleet.gpu", slot="scripts", name="live-scripts", template="live/_gpu_scripts.html")
def gpu_scripts(**page) -> dict:
    return {}
