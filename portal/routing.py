# WebSocket routes of every app; the live dashboards add theirs here.
websocket_urlpatterns: list = []
