"""POST /api/v1/prometheus/write: Prometheus remote write 1.0 (prometheus-v1.md). Small and
strict like the agents' endpoint: a 4xx only where Prometheus must not send the request again,
429/503 with Retry-After where it should. Served like it without Django's handler and middleware
(portal.core.asgi_ingest: the middleware ran every write on one thread, and cost more CPU than
the write's own work): what the middleware would have checked is checked here (the Host header,
the redirect to HTTPS)."""

import logging
import math

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.db import OperationalError, close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.security import SecurityMiddleware
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from portal.remote_write import enqueue
from portal.remote_write.services.sources import ingest_source_authenticate
from portal.remote_write.services.writes import StoreBusy, remote_write_store
from portal.remote_write.wire import WireError, snappy_decompress, write_request_decode
from portal.telemetry.ratelimit import rate_limiter

log = logging.getLogger(__name__)

# The database work runs on a pool thread with its own connection; the tests turn it off to run
# it inside their own transaction (as portal.telemetry.ingest_view does).
run_in_pool = True
_limiter = None


def _rate_limiter():
    global _limiter
    wanted = (settings.REMOTE_WRITE_RATE_PER_S, settings.REMOTE_WRITE_RATE_BURST, settings.REDIS_URL or "")
    if _limiter is None or (_limiter.rate, _limiter.burst, _limiter.redis_url) != wanted:
        rate, burst, redis_url = wanted
        _limiter = rate_limiter(rate_per_s=rate, burst=burst, redis_url=redis_url, namespace="remote-write:rate:")
    return _limiter


def _error(status: int, message: str, retry_after: int | None = None) -> JsonResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JsonResponse({"error": message}, status=status, headers=headers)


def _body(request: HttpRequest) -> bytes | JsonResponse:
    limit = settings.REMOTE_WRITE_MAX_BODY_BYTES
    declared = request.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        return _error(413, f"body larger than {limit} bytes")
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding != "snappy":
        return _error(400, "Content-Encoding must be snappy (Prometheus remote write 1.0)")
    try:
        body = request.body
    except RequestDataTooBig:
        return _error(413, f"body larger than {limit} bytes")
    if len(body) > limit:  # the ASGI application reads at most limit + 1 bytes
        return _error(413, f"body larger than {limit} bytes")
    try:
        return snappy_decompress(body, limit=limit)
    except OverflowError:
        return _error(413, f"body larger than {limit} bytes after decompression")
    except WireError as error:
        return _error(400, str(error))


def _handle(request: HttpRequest) -> HttpResponse:
    if run_in_pool:
        close_old_connections()
    try:
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        source = ingest_source_authenticate(raw.strip()) if scheme.lower() == "bearer" else None
        if source is None:
            return _error(401, "missing, unknown or revoked source token")
        wait = _rate_limiter().take(source.pk)
        if wait:
            return _error(429, "too many requests for this source", retry_after=math.ceil(wait))
        body = _body(request)
        if isinstance(body, JsonResponse):
            return body
        try:
            series = write_request_decode(body)
            result = remote_write_store(source=source, series=series)
        except WireError as error:
            return _error(400, f"not a prometheus.WriteRequest: {error}")
        except (StoreBusy, OperationalError) as error:
            log.warning("remote write: nothing stored, answered 503 (%s)", error)
            return _error(503, "the portal cannot store this now; send it again", retry_after=1)
    finally:
        if run_in_pool:
            close_old_connections()
    if result.left_for_pass:
        enqueue.hand_on_soon()
    return HttpResponse(status=204)


@csrf_exempt
@never_cache
@login_not_required
async def prometheus_write(request: HttpRequest) -> HttpResponse:
    try:
        request.get_host()
    except DisallowedHost:
        return _error(400, "Host header not in ALLOWED_HOSTS")
    redirect = SecurityMiddleware(lambda request: None).process_request(request)  # SECURE_SSL_REDIRECT
    if redirect is not None:
        return redirect
    if request.method != "POST":
        return JsonResponse({"error": "use POST"}, status=405, headers={"Allow": "POST"})
    return await sync_to_async(_handle, thread_sensitive=not run_in_pool)(request)
