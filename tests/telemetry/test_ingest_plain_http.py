"""Production refuses agent batches over plain HTTP (the host token would cross the network in clear)."""

import pytest

from portal.telemetry.ingest_view import PLAIN_HTTP_REFUSED
from portal.telemetry.models import IngestBatch
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def production(settings):
    settings.DEBUG = False
    settings.INGEST_ALLOW_HTTP = False
    settings.SECURE_PROXY_SSL_HEADER = None


def test_plain_http_is_refused_with_403_and_nothing_stored(agent, production):
    response = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1))
    assert response.status_code == 403
    assert response.json()["error"].startswith(PLAIN_HTTP_REFUSED)
    assert "PLAIN_HTTP" in response.json()["error"]
    assert IngestBatch.objects.count() == 0


def test_https_is_accepted(agent, production):
    response = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1), secure=True)
    assert response.status_code == 202, response.content


def test_a_tls_proxy_header_counts_as_https(agent, production, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    refused = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1), x_forwarded_proto="http")
    assert refused.status_code == 403
    response = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1), x_forwarded_proto="https")
    assert response.status_code == 202, response.content


def test_ingest_allow_http_lets_a_lan_portal_take_plain_http(agent, production, settings):
    settings.INGEST_ALLOW_HTTP = True
    response = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1))
    assert response.status_code == 202, response.content


def test_debug_takes_plain_http(agent, settings):
    settings.DEBUG = True
    settings.INGEST_ALLOW_HTTP = False
    response = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1))
    assert response.status_code == 202, response.content


def test_dry_run_checks_the_token_and_stores_nothing(agent):
    response = agent.post(body=b"{", x_dry_run="1")
    assert response.status_code == 200
    body = response.json()
    assert body["dry_run"] is True and body["hostname"] == agent.hostname and body["time"].endswith("Z")
    assert IngestBatch.objects.count() == 0
    refused = post_batch(agent.client, "gfh_wrong", body=b"{", x_dry_run="1")
    assert refused.status_code == 401
