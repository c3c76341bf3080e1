"""POST /api/v1/ingest: the agents' endpoint. Small and strict (see ingest-v1.md's answers)."""

import logging
import math
import time
import zlib

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import DisallowedHost
from django.db import close_old_connections, connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from pydantic import ValidationError

from portal.core.api import application_error_status
from portal.core.errors import ApplicationError
from portal.fleet import services as fleet_services
from portal.telemetry import hooks
from portal.telemetry.ingest_fast import batch_parse
from portal.telemetry.ratelimit import RedisTokenBucketLimiter, TokenBucketLimiter, rate_limiter
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services import host_token_authenticate, host_token_rotation_finish
from portal.telemetry.services.ingest import reading_batch_ingest

log = logging.getLogger(__name__)

# The agent recognises this refusal by its text (a 403, which agents hold and log rather than drop).
# An extension of ingest-v1: with this header set to 1 the token is checked and nothing stored.
DRY_RUN_HEADER = "X-Dry-Run"
PLAIN_HTTP_REFUSED = "plain HTTP refused: this portal takes agent batches over HTTPS only"

_limiter: TokenBucketLimiter | RedisTokenBucketLimiter | None = None
# The batch's database work runs on a pool thread with its own connection, so the event loop keeps
# answering meanwhile; the tests turn it off to run it inside their own transaction.
run_in_pool = True
# The batch decoded and checked by msgspec, with pydantic's BatchIn for what it refuses (exact errors;
# see portal.telemetry.ingest_fast); off: BatchIn alone, as before (bench/ingest_cpu.py compares them).
fast_path = True


def _rate_limiter() -> TokenBucketLimiter | RedisTokenBucketLimiter:
    """Per host token: with REDIS_URL one limit for every portal process, else this process's."""
    global _limiter
    wanted = (settings.INGEST_RATE_PER_S, settings.INGEST_RATE_BURST, settings.REDIS_URL or "")
    if _limiter is None or (_limiter.rate, _limiter.burst, _limiter.redis_url) != wanted:
        rate, burst, redis_url = wanted
        _limiter = rate_limiter(rate_per_s=rate, burst=burst, redis_url=redis_url, namespace="ingest:rate:")
    return _limiter


def _error(status: int, message: str, detail: list[dict] | None = None, headers: dict | None = None) -> JsonResponse:
    body = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return JsonResponse(body, status=status, headers=headers)


def _decompress(body: bytes, limit: int) -> bytes:
    """Gunzip at most limit + 1 bytes, so a gzip bomb costs us a megabyte, not a gigabyte."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = inflater.decompress(body, limit + 1)
    if len(out) > limit:
        raise OverflowError
    if not inflater.eof:
        raise zlib.error("truncated gzip stream")
    return out


def _validation_detail(error: ValidationError) -> tuple[str, list[dict]]:
    detail = []
    for item in error.errors(include_url=False, include_input=False)[:50]:
        if item["type"] == "json_invalid":
            return "malformed JSON", [{"loc": "body", "msg": item["msg"]}]
        detail.append({"loc": ".".join(str(part) for part in item["loc"]) or "body", "msg": item["msg"]})
    return "invalid batch", detail


# Django checks a kept connection with a round trip (SELECT 1) before a request's first query
# (CONN_HEALTH_CHECKS). A pool thread's connection that served a batch less than this long ago is
# taken as alive: a server restart within that second costs one batch a 5xx, which its agent sends
# again, and Django closes the failed connection after that request.
HEALTHY_FOR_S = 1.0
_SERVED_AT = "ingest_served_at"  # on the thread's connection wrapper: when it last served a batch


def _connection_begin() -> None:
    # Only on a pool thread: on the request's own thread Django's request signals already do this,
    # and closing there would drop a surrounding transaction (a test's).
    if run_in_pool:
        close_old_connections()
        served_at = getattr(connection, _SERVED_AT, None)
        if connection.connection is not None and served_at is not None:
            connection.health_check_done = time.monotonic() - served_at < HEALTHY_FOR_S


def _connection_end() -> None:
    if run_in_pool:
        close_old_connections()  # closes a connection that failed (or outlived CONN_MAX_AGE)
        setattr(connection, _SERVED_AT, time.monotonic() if connection.connection is not None else None)


def _authenticate(request: HttpRequest):
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        return None
    return host_token_authenticate(raw.strip())


def _read_body(request: HttpRequest) -> bytes | JsonResponse:
    """The JSON body, decompressed and size-checked before anything parses it; or the error."""
    limit = settings.INGEST_MAX_BODY_BYTES
    declared = request.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        return _error(413, f"body larger than {limit} bytes")
    body = request.body
    if len(body) > limit:
        return _error(413, f"body larger than {limit} bytes")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding == "gzip":
        try:
            body = _decompress(body, limit)
        except OverflowError:
            return _error(413, f"body larger than {limit} bytes after decompression")
        except zlib.error as error:
            return _error(400, "body is not valid gzip", [{"loc": "body", "msg": str(error)}])
    elif encoding != "identity":
        return _error(415, f"unsupported Content-Encoding {encoding!r}; use gzip or none")
    content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip().lower()
    if content_type != "application/json":
        return _error(415, "Content-Type must be application/json")
    return body


def _dry_run_answer(token) -> JsonResponse:
    # `gpu-fleet-agent doctor`: the token is checked and nothing is read or stored; the portal's
    # time lets the agent check its clock against the acceptance window.
    return JsonResponse(
        {"accepted": 0, "duplicate": False, "dry_run": True, "hostname": token.host.hostname,
         "time": timezone.now().isoformat().replace("+00:00", "Z")},
        status=200,
    )  # fmt: skip


def _handle(request: HttpRequest) -> JsonResponse:
    """Everything after the Host check, in one trip to a worker thread: token, rate limit,
    body, validation, storage (each hop between the event loop and a thread costs CPU)."""
    _connection_begin()
    try:
        token = _authenticate(request)
        if token is None:
            return _error(401, "missing, unknown or revoked host token")
        if request.headers.get(DRY_RUN_HEADER, "").strip() == "1":
            return _dry_run_answer(token)
        wait = _rate_limiter().take(token.pk)
        if wait:
            retry_after = str(math.ceil(wait))
            return _error(429, "too many requests for this host token", headers={"Retry-After": retry_after})
        body = _read_body(request)
        if isinstance(body, JsonResponse):
            return body
        try:
            batch = batch_parse(body) if fast_path else BatchIn.model_validate_json(body)
        except ValidationError as error:
            message, detail = _validation_detail(error)
            return _error(400, message, detail)
        try:
            result = reading_batch_ingest(host=token.host, batch=batch)
        except ApplicationError as refused:
            # The protocol's answers: 400 with a detail per problem, 403 with the error alone.
            detail = refused.detail() if refused.problems else None
            return _error(application_error_status(refused), refused.message, detail)
        if token.replaces_id is not None:  # the first batch with a rotated token: the old one goes
            host_token_rotation_finish(token=token)
        commands = _commands(token.host)
    finally:
        _connection_end()
    if result.duplicate:
        body, status = {"accepted": 0, "duplicate": True}, 200
    else:
        body, status = {"accepted": result.accepted, "duplicate": False}, 202
    if commands:
        body["commands"] = commands
    return JsonResponse(body, status=status)


def _commands(host) -> list[dict]:
    """Work asked of this host (ingest-v1.md, "Commands"), offered with every answer until the
    agent reports it started or it expires. Looked for only while the host has some queued (read
    with its token, no query); the first answer that finds none left stops the looking."""
    queued = host.commands_queued_at
    if queued is None:
        return []
    commands = hooks.host_commands_for(host_id=host.pk)
    if commands is None:
        return []
    if not commands:
        fleet_services.host_commands_done(host_id=host.pk, seen=queued)
    return commands


def plain_http_refused(request: HttpRequest) -> bool:
    # is_secure() honours X-Forwarded-Proto with TRUST_PROXY_HEADERS (portal.core.forwarded); DEBUG
    # (the demo, the tests) runs on loopback over HTTP.
    return not (settings.DEBUG or settings.INGEST_ALLOW_HTTP or request.is_secure())


def _run_db(function):
    # In production the database work runs in a thread pool so that batches are stored side by
    # side; tests that share one transaction with the view keep it on the request's thread.
    return sync_to_async(function, thread_sensitive=not run_in_pool)


@csrf_exempt
@never_cache
@login_not_required
async def ingest(request: HttpRequest):
    if request.method != "POST":
        response = _error(405, "use POST", headers={"Allow": "POST"})
    else:
        try:
            # Served without the middleware stack (see portal.core.asgi_ingest), so the Host
            # header is checked here.
            request.get_host()
        except DisallowedHost:
            response = _error(400, "Host header not in ALLOWED_HOSTS")
        else:
            if plain_http_refused(request):
                response = _error(403, PLAIN_HTTP_REFUSED + " (or set PLAIN_HTTP=true on a trusted network)")
            else:
                response = await _run_db(_handle)(request)
    return response


def _openapi_schema(model) -> dict:
    """The model's JSON schema with its $defs inlined: pydantic's '#/$defs/...' references point
    nowhere inside an OpenAPI document, and tools reading the document cannot resolve them."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            reference = node.get("$ref", "")
            if reference.startswith("#/$defs/"):
                return inline(definitions[reference.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    return inline(schema)


def ingest_openapi_operation() -> dict:
    """The ingest operation for the OpenAPI document (the view is plain Django, for speed)."""
    from portal.telemetry.schemas import ErrorOut, IngestAccepted

    def error(description):
        return {"description": description, "content": {"application/json": {"schema": _openapi_schema(ErrorOut)}}}

    return {
        "post": {
            "operationId": "ingest_batch",
            "summary": "Agent batch of readings (ingest-v1)",
            "tags": ["ingest"],
            "security": [{"HostToken": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _openapi_schema(BatchIn)}},
            },
            "responses": {
                "202": {
                    "description": "stored",
                    "content": {"application/json": {"schema": _openapi_schema(IngestAccepted)}},
                },
                "200": {
                    "description": "batch_id seen before; nothing new written. With `X-Dry-Run: 1`: the token "
                    "is valid; the body is not read and nothing is stored (`dry_run`, `hostname`, `time` added)",
                    "content": {"application/json": {"schema": _openapi_schema(IngestAccepted)}},
                },
                "400": error("malformed JSON, wrong type, out-of-range value, too old/new"),
                "401": error("missing, wrong or revoked token"),
                "403": error(
                    "GPU of another host, or a new GPU past the host's bound (MAX_GPUS_PER_HOST, default 64): "
                    "detail names the first GPU refused; or plain HTTP with DEBUG off and PLAIN_HTTP off "
                    "(error starts with 'plain HTTP refused')"
                ),
                "413": error("body too large"),
                "415": error("unsupported content type or encoding"),
                "429": error("rate limited; see Retry-After"),
            },
        }
    }
