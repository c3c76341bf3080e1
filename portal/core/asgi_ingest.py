"""A small ASGI application for the ingest endpoints (the agents', Prometheus remote write), in
place of Django's handler.

The portal's middleware (WhiteNoise, django-auditlog) is sync-only. Behind it, every request
is run on Django's single "thread-sensitive" thread, which serialises a server process's
requests. And Django's ASGI handler itself, even without middleware, starts a thread per
request for its request_started / request_finished signals and runs a disconnect listener
beside the view: a sixth of ingest's CPU. Ingest needs none of it (no session, no CSRF, no
static files, no audit actor; the view manages its database connections on its own worker
thread), so its path gets this application: read the body, build the request, await the view,
send the answer. The view checks the Host header itself (and what else the middleware would
have: the plain-HTTP redirect or refusal).
"""

import io
import logging

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import OperationalError
from django.http import JsonResponse

log = logging.getLogger(__name__)


async def _read_body(receive, limit: int) -> bytes | None:
    """The request body, or None if the client went away. Stops reading past limit + 1 bytes:
    the view then answers 413 (after the token check, as the protocol orders the answers)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit or not message.get("more_body", False):
            return b"".join(chunks)[: limit + 1]


class IngestASGIApp:
    def __init__(self, view, *, limit_setting: str = "INGEST_MAX_BODY_BYTES", name: str = "ingest"):
        self.view, self.limit_setting, self.name = view, limit_setting, name

    async def __call__(self, scope, receive, send):
        body = await _read_body(receive, getattr(settings, self.limit_setting))
        if body is None:
            return
        try:
            response = await self.view(ASGIRequest(scope, io.BytesIO(body)))
        except OperationalError as error:
            # The database is busy or away (SQLite's write lock past its busy timeout under load,
            # PostgreSQL restarting): nothing was stored, and the agent keeps the batch and
            # retries when told to.
            log.warning("%s: database unavailable (%s); answered 503", self.name, error)
            response = JsonResponse({"error": "database busy, retry later"}, status=503)
            response["Retry-After"] = "1"
        except Exception:
            log.exception("%s request failed", self.name)
            response = JsonResponse({"error": "internal server error"}, status=500)
        # What CommonMiddleware sets on the portal's other answers; without it the server
        # falls back to chunked encoding.
        response["Content-Length"] = str(len(response.content))
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": response.content})
