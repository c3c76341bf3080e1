"""Remote write through the real ASGI application: like the agents' ingest, its path skips Django's
handler and middleware (portal.core.asgi_ingest), so what the middleware would have checked (the
Host header, the redirect to HTTPS) is checked by the view, and the body is read up to its limit."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import ApplicationCommunicator
from django.db import connection

from portal.asgi import application
from portal.remote_write.models import IngestSource
from portal.telemetry.models import Reading
from tests.remote_write.helpers import FULL, body, now_ms, sample_series


@sync_to_async
def _issue() -> str:
    from portal.remote_write.services.sources import ingest_source_issue

    try:
        return ingest_source_issue(name="asgi-prometheus", hosts="prom-*").token
    finally:
        connection.close()


@sync_to_async
def _stored() -> tuple[int, int]:
    try:
        return Reading.objects.count(), IngestSource.objects.get().samples_stored
    finally:
        connection.close()


def _chunks(data: bytes, size: int) -> list[dict]:
    pieces = [data[start : start + size] for start in range(0, len(data), size)] or [b""]
    return [{"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1} for i, piece in enumerate(pieces)]


async def _exchange(token: str, data: bytes, *, host: bytes = b"testserver", method: str = "POST", scheme="http"):
    scope = {
        "type": "http", "http_version": "1.1", "method": method, "path": "/api/v1/prometheus/write",
        "raw_path": b"/api/v1/prometheus/write", "query_string": b"", "root_path": "", "scheme": scheme,
        "headers": [(b"host", host), (b"authorization", f"Bearer {token}".encode()),
                    (b"content-encoding", b"snappy"), (b"content-type", b"application/x-protobuf")],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    communicator = ApplicationCommunicator(application, scope)
    for message in _chunks(data, 700):
        await communicator.send_input(message)
    await communicator.wait(timeout=10)
    sent = []
    while not communicator.output_queue.empty():
        sent.append(communicator.output_queue.get_nowait())
    headers = {name.decode().lower(): value.decode() for name, value in sent[0]["headers"]}
    return sent[0]["status"], headers, sent[1]["body"]


@pytest.mark.django_db(transaction=True)
async def test_a_write_is_stored_through_the_asgi_application(settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    token = await _issue()
    status, headers, _ = await _exchange(token, body(sample_series(FULL, now_ms(-60))))
    assert status == 204
    assert "no-cache" in headers.get("cache-control", "")
    assert (await _stored())[1] == len(FULL)


@pytest.mark.django_db(transaction=True)
async def test_a_host_header_not_allowed_is_refused_without_storing(settings):
    settings.ALLOWED_HOSTS = ["portal.example.org"]
    token = await _issue()
    status, _, answer = await _exchange(token, body(sample_series(FULL, now_ms(-60))), host=b"evil.example")
    assert status == 400 and b"Host" in answer
    assert await _stored() == (0, 0)


@pytest.mark.django_db(transaction=True)
async def test_plain_http_is_redirected_to_https_as_the_middleware_did(settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.SECURE_SSL_REDIRECT = True
    token = await _issue()
    status, headers, _ = await _exchange(token, body(sample_series(FULL, now_ms(-60))))
    assert status == 301 and headers["location"] == "https://testserver/api/v1/prometheus/write"
    status, _, _ = await _exchange(token, body(sample_series(FULL, now_ms(-60))), scheme="https")
    assert status == 204


@pytest.mark.django_db(transaction=True)
async def test_a_body_past_the_limit_without_content_length_is_413(settings):
    """Sent in chunks, no Content-Length: the application stops reading past the limit and the
    view answers 413, not the 400 of a cut snappy body."""
    settings.ALLOWED_HOSTS = ["testserver"]
    data = body(sample_series(FULL, now_ms(-60)))
    settings.REMOTE_WRITE_MAX_BODY_BYTES = len(data) - 10
    token = await _issue()
    status, _, answer = await _exchange(token, data)
    assert status == 413 and b"larger than" in answer and b"decompression" not in answer  # the body's own size
    assert await _stored() == (0, 0)
