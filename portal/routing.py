"""WebSocket routes of every app (wired in portal/asgi.py behind the origin check and the session)."""

from portal.live.routing import websocket_urlpatterns as live_patterns

websocket_urlpatterns: list = [*live_patterns]
