from django.urls import path

import portal.core.converters  # noqa: F401 - registers <segment:…>
from portal.live import consumers

websocket_urlpatterns = [
    path("ws/live/gpu/<segment:uuid>/", consumers.GpuConsumer.as_asgi()),
    path("ws/live/host/<segment:hostname>/", consumers.HostConsumer.as_asgi()),
    path("ws/live/fleet/", consumers.FleetConsumer.as_asgi()),
    path("ws/live/tickets/", consumers.TicketFeedConsumer.as_asgi()),
]
