"""Minting and revoking host tokens on the host page: admins only, the secret shown once."""

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from portal.telemetry.models import HostToken
from portal.telemetry.services import host_token_authenticate, host_token_issue
from tests.factories import HostFactory


@pytest.fixture
def host(db):
    return HostFactory(hostname="dgx-07")


def test_admin_mints_a_token_shown_once_that_authenticates(client_for, admin, host):
    response = client_for(admin).post("/hosts/dgx-07/tokens/new/", {"label": "agent"})

    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"] or "no-cache" in response["Cache-Control"]
    token = HostToken.objects.get(host=host)
    secret = response.context["issued"].token
    assert secret in response.content.decode()
    assert host_token_authenticate(secret).pk == token.pk
    assert (token.label, token.created_by) == ("agent", admin)
    # The host page lists it by prefix, never the secret.
    page = client_for(admin).get("/hosts/dgx-07/").content.decode()
    assert token.prefix in page and secret not in page


def test_a_label_too_long_is_refused_and_nothing_minted(client_for, admin, host):
    response = client_for(admin).post("/hosts/dgx-07/tokens/new/", {"label": "x" * 101}, follow=True)

    assert "label" in response.content.decode()
    assert not HostToken.objects.exists()


@pytest.mark.parametrize("role", ["technician", "viewer", "outsider"])
def test_only_admins_mint_or_revoke(client_for, request, host, role):
    user = request.getfixturevalue(role)
    issued = host_token_issue(hostname="dgx-07")
    client = client_for(user)

    assert client.post("/hosts/dgx-07/tokens/new/", {"label": "x"}).status_code == 403
    assert client.post(f"/hosts/dgx-07/tokens/{issued.record.pk}/revoke/").status_code == 403
    assert HostToken.objects.count() == 1
    assert host_token_authenticate(issued.token) is not None


def test_admin_revokes_and_the_agent_is_refused(client_for, admin, host):
    issued = host_token_issue(hostname="dgx-07")

    response = client_for(admin).post(f"/hosts/dgx-07/tokens/{issued.record.pk}/revoke/")

    assert response.status_code == 302
    assert host_token_authenticate(issued.token) is None


def test_a_token_of_another_host_or_unknown_host_is_404(client_for, admin, host):
    other = host_token_issue(hostname="dgx-99", create_host=True)
    client = client_for(admin)

    assert client.post(f"/hosts/dgx-07/tokens/{other.record.pk}/revoke/").status_code == 404
    assert client.post("/hosts/nope/tokens/new/", {"label": ""}).status_code == 404
    assert host_token_authenticate(other.token) is not None


def test_the_host_page_shows_each_tokens_age_last_use_and_a_pending_rotation(client_for, admin, host):
    now = timezone.now()
    old = host_token_issue(hostname="dgx-07", label="agent")
    rotated = (
        Client()
        .post(
            "/api/v1/host-tokens/rotate", {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {old.token}"
        )
        .json()
    )
    HostToken.objects.filter(pk=old.record.pk).update(
        created_at=now - dt.timedelta(days=40), last_used_at=now - dt.timedelta(days=3, minutes=5)
    )
    unused = host_token_issue(hostname="dgx-07", label="spare")
    HostToken.objects.filter(pk=unused.record.pk).update(created_at=now - dt.timedelta(days=2, hours=1))
    page = client_for(admin).get("/hosts/dgx-07/").content.decode()
    rows = {token.prefix: page.split(f"<code>{token.prefix}…</code>", 1)[1].split("</tr>", 1)[0]
            for token in HostToken.objects.all()}  # fmt: skip
    assert "1\xa0month, 1\xa0week" in rows[old.record.prefix]  # its age
    assert "3\xa0days ago" in rows[old.record.prefix]  # its last use, and when that was
    assert "2\xa0days" in rows[unused.record.prefix] and "never" in rows[unused.record.prefix]
    assert f"rotated: {old.record.prefix}… is revoked when the first batch arrives" in rows[rotated["prefix"]]
    HostToken.objects.filter(pk=unused.record.pk).update(last_used_at=now)  # used seconds ago
    page = client_for(admin).get("/hosts/dgx-07/").content.decode()
    row = page.split(f"<code>{unused.record.prefix}…</code>", 1)[1].split("</tr>", 1)[0]
    assert "(just now)" in row and "0\xa0minutes" not in row
