"""Ingest through the real ASGI application: the agents' path skips the middleware stack
(portal.core.asgi_ingest), so what the middleware would have checked is checked by the view."""

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import HttpCommunicator
from django.db import connection

from portal.asgi import application
from portal.telemetry.models import IngestBatch, Reading
from tests.telemetry.batches import make_batch

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def count(model) -> int:
    # Closes the connection it opened on asgiref's worker thread (Model.objects.acount() leaves it
    # open, and PostgreSQL then refuses to drop the test database at the end of the session).
    try:
        return model.objects.count()
    finally:
        connection.close()


async def _post(token: str, body: bytes, host: str = "testserver") -> tuple[int, dict, dict]:
    communicator = HttpCommunicator(
        application,
        "POST",
        "/api/v1/ingest",
        body=body,
        headers=[
            (b"host", host.encode()),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
        ],
    )
    response = await communicator.get_response(timeout=10)
    headers = {name.decode().lower(): value.decode() for name, value in response["headers"]}
    return response["status"], json.loads(response["body"]), headers


@pytest.fixture
def issued():
    from portal.telemetry.services import host_token_issue

    return host_token_issue(hostname="asgi-host", create_host=True)


async def test_batch_is_stored_through_the_asgi_application(issued, settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    batch = make_batch("asgi-host", readings=3)

    status, body, headers = await _post(issued.token, json.dumps(batch).encode())

    assert (status, body) == (202, {"accepted": 3, "duplicate": False})
    assert "no-cache" in headers.get("cache-control", "")
    assert headers["content-length"] == str(len(json.dumps(body, separators=(", ", ": "))))
    assert await count(Reading) == 3


async def test_a_host_header_not_allowed_is_refused_without_storing(issued, settings):
    settings.ALLOWED_HOSTS = ["portal.example.org"]
    batch = make_batch("asgi-host", readings=3)

    status, body, _ = await _post(issued.token, json.dumps(batch).encode(), host="evil.example")

    assert status == 400
    assert "Host" in body["error"]
    assert await count(IngestBatch) == 0


async def _exchange(messages: list[dict], headers: list[tuple[bytes, bytes]], method: str = "POST") -> list[dict]:
    """Drive the application with the given receive messages; everything it sent back."""
    from channels.testing import ApplicationCommunicator

    scope = {
        "type": "http", "http_version": "1.1", "method": method, "path": "/api/v1/ingest",
        "raw_path": b"/api/v1/ingest", "query_string": b"", "root_path": "", "scheme": "http",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
    }  # fmt: skip
    communicator = ApplicationCommunicator(application, scope)
    for message in messages:
        await communicator.send_input(message)
    await communicator.wait(timeout=10)  # the application returns once it has answered (or not)
    sent = []
    while not communicator.output_queue.empty():
        sent.append(communicator.output_queue.get_nowait())
    return sent


def _chunks(body: bytes, size: int) -> list[dict]:
    pieces = [body[start : start + size] for start in range(0, len(body), size)]
    return [{"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1} for i, piece in enumerate(pieces)]


async def test_a_batch_sent_in_chunks_is_read_whole(issued, settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    body = json.dumps(make_batch("asgi-host", readings=20)).encode()
    headers = [(b"authorization", f"Bearer {issued.token}".encode()), (b"content-type", b"application/json")]

    sent = await _exchange(_chunks(body, 700), headers)

    assert sent[0]["status"] == 202, sent
    assert json.loads(sent[1]["body"]) == {"accepted": 20, "duplicate": False}
    assert await count(Reading) == 20


async def test_an_oversized_chunked_body_is_413_after_the_token_check(issued, settings):
    """No Content-Length to refuse it by: the application stops reading past the limit, and the
    view answers in the protocol's order (a bad token is still a 401)."""
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.INGEST_MAX_BODY_BYTES = 4096
    body = b"[" + b"0," * 10_000 + b"0]"

    good = await _exchange(_chunks(body, 1000), [(b"authorization", f"Bearer {issued.token}".encode())])
    bad = await _exchange(_chunks(body, 1000), [(b"authorization", b"Bearer gfh_not-a-token")])

    assert good[0]["status"] == 413 and "larger than 4096" in json.loads(good[1]["body"])["error"]
    assert bad[0]["status"] == 401
    assert await count(IngestBatch) == 0


async def test_a_client_gone_before_the_body_ends_gets_nothing_stored(issued, settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    body = json.dumps(make_batch("asgi-host", readings=5)).encode()
    messages = [{"type": "http.request", "body": body[:100], "more_body": True}, {"type": "http.disconnect"}]

    sent = await _exchange(messages, [(b"authorization", f"Bearer {issued.token}".encode())])

    assert sent == []
    assert await count(IngestBatch) == 0


async def test_a_failure_inside_the_view_is_a_json_500_and_logged(issued, settings, monkeypatch, caplog):
    settings.ALLOWED_HOSTS = ["testserver"]

    def storage_fails(**kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("portal.telemetry.ingest_view.reading_batch_ingest", storage_fails)
    body = json.dumps(make_batch("asgi-host", readings=2)).encode()

    sent = await _exchange(_chunks(body, 10_000), [(b"authorization", f"Bearer {issued.token}".encode())])

    assert sent[0]["status"] == 500
    assert json.loads(sent[1]["body"]) == {"error": "internal server error"}
    assert "ingest request failed" in caplog.text and "disk on fire" in caplog.text


async def test_a_busy_database_is_a_503_with_retry_after_not_a_500(issued, settings, monkeypatch, caplog):
    """SQLite's write lock past the busy timeout (web, worker and beat writing under load)."""
    from django.db import OperationalError

    settings.ALLOWED_HOSTS = ["testserver"]

    def storage_busy(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr("portal.telemetry.ingest_view.reading_batch_ingest", storage_busy)
    body = json.dumps(make_batch("asgi-host", readings=2)).encode()

    sent = await _exchange(_chunks(body, 10_000), [(b"authorization", f"Bearer {issued.token}".encode())])

    assert sent[0]["status"] == 503
    assert (b"retry-after", b"1") in [(name.lower(), value) for name, value in sent[0]["headers"]]
    assert "database unavailable" in caplog.text


async def test_get_is_405_through_the_application(settings):
    settings.ALLOWED_HOSTS = ["testserver"]

    sent = await _exchange([{"type": "http.request", "body": b""}], [], method="GET")

    assert sent[0]["status"] == 405
    assert (b"allow", b"POST") in [(name.lower(), value) for name, value in sent[0]["headers"]]
