import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# Django must be set up before anything imports models (the consumers do).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from portal.core.asgi_ingest import IngestASGIApp  # noqa: E402
from portal.core.forwarded import ProxyHeadersMiddleware  # noqa: E402
from portal.ops.heap import freeze_startup_objects  # noqa: E402
from portal.remote_write.write_view import prometheus_write  # noqa: E402
from portal.routing import websocket_urlpatterns  # noqa: E402
from portal.telemetry.ingest_view import ingest  # noqa: E402

INGEST_PATH, REMOTE_WRITE_PATH = "/api/v1/ingest", "/api/v1/prometheus/write"
# The ingest endpoints skip Django's handler and middleware; see portal.core.asgi_ingest.
INGEST_APPS = {
    INGEST_PATH: IngestASGIApp(ingest),
    REMOTE_WRITE_PATH: IngestASGIApp(
        prometheus_write, limit_setting="REMOTE_WRITE_MAX_BODY_BYTES", name="remote write"
    ),
}

ingest_asgi_app = INGEST_APPS[INGEST_PATH]


async def http_application(scope, receive, send):
    await INGEST_APPS.get(scope["path"], django_asgi_app)(scope, receive, send)


# The client's address and scheme from the proxy in front, when TRUST_PROXY_HEADERS says there is one.
application = ProxyHeadersMiddleware(
    ProtocolTypeRouter(
        {
            "http": http_application,
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)

# The URLconf (the API's schemas: most of the start-up objects) loads now, not on the first
# request, so that it is frozen with the rest: see portal/ops/heap.py.
get_resolver().url_patterns  # noqa: B018
freeze_startup_objects()
