"""An agent rotates its own host token (`gpu-fleet-agent rotate-token`): POST /api/v1/host-tokens/rotate
with the current token gives a new one for the same host; the old one stays valid until the first
batch arrives with the new one, then is revoked."""

import pytest
from django.test import Client

from portal.telemetry.ingest_view import PLAIN_HTTP_REFUSED
from portal.telemetry.models import HostToken
from portal.telemetry.services import host_token_authenticate, host_token_issue, host_token_revoke
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch

pytestmark = pytest.mark.django_db
URL = "/api/v1/host-tokens/rotate"


def rotate(token: str | None, body=None, **extra):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().post(URL, {} if body is None else body, content_type="application/json", **headers, **extra)


def test_a_new_token_for_the_same_host_and_the_old_one_goes_with_the_first_batch(agent):
    response = rotate(agent.token)
    assert response.status_code == 201, response.content
    answer = response.json()
    assert set(answer) == {"hostname", "token", "prefix", "replaces"}
    assert answer["hostname"] == agent.hostname and answer["replaces"] == agent.record.prefix
    new = host_token_authenticate(answer["token"])
    assert new.host == agent.host and answer["token"].startswith(answer["prefix"])
    assert new.replaces_id == agent.record.pk and new.label == f"rotated from {agent.record.prefix}…"
    # The old token keeps working (the agent may not have stored the new one yet)...
    batch = make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1)
    assert agent.post(batch).status_code == 202
    assert host_token_authenticate(agent.token) is not None
    # ...until the first batch with the new one: then it is revoked, and the new one stays.
    assert post_batch(Client(), answer["token"], make_batch(agent.hostname, gpus=[gpu_uuid(1)])).status_code == 202
    assert host_token_authenticate(agent.token) is None
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)])).status_code == 401
    new.refresh_from_db()
    assert new.revoked_at is None and new.replaces_id is None


def test_a_duplicate_batch_with_the_new_token_counts_too(agent):
    batch = make_batch(agent.hostname, gpus=[gpu_uuid(1)], readings=1)
    assert agent.post(batch).status_code == 202
    new = rotate(agent.token).json()["token"]
    assert post_batch(Client(), new, batch).status_code == 200  # the agent resent it with the new token
    assert host_token_authenticate(agent.token) is None


def test_a_dry_run_with_the_new_token_revokes_nothing(agent):
    new = rotate(agent.token).json()["token"]
    answer = Client().post("/api/v1/ingest", b"{}", content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {new}", HTTP_X_DRY_RUN="1")  # fmt: skip
    assert answer.status_code == 200 and answer.json()["dry_run"] is True
    assert host_token_authenticate(agent.token) is not None


def test_rotating_again_revokes_what_an_earlier_rotation_left_unused(agent):
    lost = rotate(agent.token).json()["token"]  # the agent could not store it
    again = rotate(agent.token).json()["token"]
    assert host_token_authenticate(lost) is None and host_token_authenticate(agent.token) is not None
    # Rotating with the new token before any batch: the agent holds it, so the old one goes now.
    third = rotate(again).json()["token"]
    assert host_token_authenticate(agent.token) is None and host_token_authenticate(again) is not None
    assert host_token_authenticate(third).replaces.pk == host_token_authenticate(again).pk
    assert HostToken.objects.filter(host=agent.host, revoked_at__isnull=True).count() == 2


def test_other_tokens_of_the_host_are_left_alone(agent):
    spare = host_token_issue(hostname=agent.hostname, label="spare")
    new = rotate(agent.token).json()["token"]
    post_batch(Client(), new, make_batch(agent.hostname, gpus=[gpu_uuid(1)]))
    assert host_token_authenticate(spare.token) is not None


@pytest.mark.parametrize(
    ("token", "body", "status", "loc"),
    [
        (None, {}, 401, None),
        ("gfh_unknown", {}, 401, None),
        ("VALID", {"label": "x" * 101}, 400, "label"),
        ("VALID", {"label": 5}, 400, "label"),
        ("VALID", "not json", 400, None),
    ],
)
def test_bad_requests_are_refused_and_issue_nothing(agent, token, body, status, loc):
    response = rotate(agent.token if token == "VALID" else token, body)
    assert response.status_code == status, response.content
    answer = response.json()
    assert answer["error"]
    if status == 401:
        assert "host token" in answer["error"]
    if loc:
        assert any(item["loc"].endswith(loc) for item in answer["detail"]), answer
    assert HostToken.objects.count() == 1


def test_a_revoked_token_cannot_rotate(agent):
    host_token_revoke(token=agent.record)
    assert rotate(agent.token).status_code == 401
    assert HostToken.objects.count() == 1


def test_a_personal_token_or_a_session_cannot_rotate(agent, client_for, admin):
    assert client_for(admin).post(URL, {}, content_type="application/json").status_code == 401
    assert HostToken.objects.count() == 1


def test_plain_http_is_refused_in_production(agent, settings):
    settings.DEBUG, settings.INGEST_ALLOW_HTTP, settings.SECURE_PROXY_SSL_HEADER = False, False, None
    refused = rotate(agent.token)
    assert refused.status_code == 403 and refused.json()["error"].startswith(PLAIN_HTTP_REFUSED)
    assert HostToken.objects.count() == 1
    assert rotate(agent.token, secure=True).status_code == 201


def test_in_openapi_with_the_host_token_scheme(client_for, viewer):
    operation = client_for(viewer).get("/api/v1/openapi.json").json()["paths"][URL]["post"]
    assert operation["security"] == [{"HostToken": []}]
    assert {"201", "400", "401", "403"} <= set(operation["responses"])
