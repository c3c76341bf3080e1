from django.urls import path

from portal.live import consumers

websocket_urlpatterns = [
    path("ws/live/gpu/<str:uuid>/", consumers.GpuConsumer.as_asgi()),
    path("ws/live/host/<str:hostname>/", consumers.HostConsumer.as_asgi()),
    path("ws/live/fleet/", consumers.FleetConsumer.as_asgi()),
    path("ws/live/tickets/", consumers.TicketFeedConsumer.as_asgi()),
]
