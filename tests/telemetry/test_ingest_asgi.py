"""Ingest through the real ASGI application: the agents' path skips the middleware stack
(portal.core.asgi_ingest), so what the middleware would have checked is checked by the view."""

import json

import pytest
from channels.testing import HttpCommunicator

from portal.asgi import application
from portal.telemetry.models import IngestBatch, Reading
from tests.telemetry.batches import make_batch

pytestmark = pytest.mark.django_db(transaction=True)


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
    assert await Reading.objects.acount() == 3


async def test_a_host_header_not_allowed_is_refused_without_storing(issued, settings):
    settings.ALLOWED_HOSTS = ["portal.example.org"]
    batch = make_batch("asgi-host", readings=3)

    status, body, _ = await _post(issued.token, json.dumps(batch).encode(), host="evil.example")

    assert status == 400
    assert "Host" in body["error"]
    assert await IngestBatch.objects.acount() == 0
