"""Host and personal API tokens: hashed at rest, prefix visible, revocable, last use written at
most once a minute, and minted by the issue_token / create_api_token commands."""

import datetime as dt
import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from portal.accounts.models import ApiToken
from portal.accounts.services import api_token_authenticate, api_token_issue, api_token_revoke
from portal.fleet.models import Host
from portal.telemetry.models import HostToken
from portal.telemetry.services import host_token_authenticate, host_token_issue, host_token_revoke
from tests.factories import UserFactory
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch

pytestmark = pytest.mark.django_db

HOST_TOKEN = re.compile(r"^gfh_[A-Za-z0-9_-]{40,}$")
USER_TOKEN = re.compile(r"^gfu_[A-Za-z0-9_-]{40,}$")


def stored_text(model) -> str:
    return repr(list(model.objects.values_list()))


def test_host_token_is_stored_hashed_with_a_visible_prefix(db):
    issued = host_token_issue(hostname="dgx-01", create_host=True)
    assert HOST_TOKEN.match(issued.token)
    record = HostToken.objects.get()
    assert issued.token not in stored_text(HostToken)
    assert issued.token[4:] not in stored_text(HostToken)
    assert record.secret_hash != issued.token and len(record.secret_hash) == 64
    assert issued.token.startswith(record.prefix) and len(record.prefix) >= 8
    assert record.prefix in str(record)
    assert host_token_authenticate(issued.token) == record
    assert host_token_authenticate(issued.token + "x") is None
    assert host_token_authenticate(record.prefix) is None


def test_personal_token_is_stored_hashed_with_a_visible_prefix(viewer):
    secret, token = api_token_issue(user=viewer, label="script")
    assert USER_TOKEN.match(secret)
    assert secret not in stored_text(ApiToken)
    assert secret.startswith(token.prefix) and len(token.prefix) >= 8
    assert api_token_authenticate(secret) == viewer
    assert api_token_authenticate(secret[:-1]) is None


def test_host_token_for_a_missing_host_is_refused_unless_asked_to_create(db):
    with pytest.raises(Host.DoesNotExist):
        host_token_issue(hostname="nowhere")
    assert not Host.objects.exists()


def test_revoked_host_token_is_401(agent):
    batch = make_batch(agent.hostname, gpus=[gpu_uuid(1)])
    assert agent.post(batch).status_code == 202
    host_token_revoke(token=agent.record)
    assert agent.record.revoked_at is not None
    assert host_token_authenticate(agent.token) is None
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)])).status_code == 401
    # another live token of the same host still works
    other = host_token_issue(hostname=agent.hostname)
    assert post_batch(Client(), other.token, make_batch(agent.hostname, gpus=[gpu_uuid(1)])).status_code == 202


def test_revoked_personal_token_is_401(viewer):
    secret, token = api_token_issue(user=viewer)
    headers = {"HTTP_AUTHORIZATION": f"Token {secret}"}
    assert Client().get("/api/v1/hosts", **headers).status_code == 200
    api_token_revoke(token=token)
    response = Client().get("/api/v1/hosts", **headers)
    assert response.status_code == 401
    assert "error" in response.json()


def test_host_token_last_used_is_written_at_most_once_a_minute(agent, django_assert_num_queries):
    assert agent.record.last_used_at is None
    assert host_token_authenticate(agent.token) is not None
    agent.record.refresh_from_db()
    first = agent.record.last_used_at
    assert first is not None and timezone.now() - first < dt.timedelta(seconds=5)

    with django_assert_num_queries(1):  # the lookup only, no UPDATE
        assert host_token_authenticate(agent.token) is not None
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)])).status_code == 202
    agent.record.refresh_from_db()
    assert agent.record.last_used_at == first

    # a minute later it is written again
    HostToken.objects.filter(pk=agent.record.pk).update(last_used_at=first - dt.timedelta(seconds=61))
    with django_assert_num_queries(2):
        assert host_token_authenticate(agent.token) is not None
    agent.record.refresh_from_db()
    assert agent.record.last_used_at > first


def test_personal_token_last_used_is_written_at_most_once_a_minute(viewer, django_assert_num_queries):
    secret, token = api_token_issue(user=viewer)
    assert api_token_authenticate(secret) == viewer
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    with django_assert_num_queries(1):
        assert api_token_authenticate(secret) == viewer
    token.refresh_from_db()
    assert token.last_used_at == first
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - dt.timedelta(minutes=2))
    assert api_token_authenticate(secret) == viewer
    token.refresh_from_db()
    assert token.last_used_at > first - dt.timedelta(minutes=1)


def run_command(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_issue_token_creates_the_host_and_prints_the_token_alone_on_the_last_line(db):
    out, err = run_command("issue_token", "dgx-new", "--label", "agent on dgx-new")
    token = out.strip().splitlines()[-1]
    assert HOST_TOKEN.match(token)
    assert token not in err  # the notice on stderr shows the prefix only
    host = Host.objects.get(hostname="dgx-new")
    record = HostToken.objects.get(host=host)
    assert record.label == "agent on dgx-new"
    assert err and record.prefix in err
    response = post_batch(Client(), token, make_batch("dgx-new", gpus=[gpu_uuid(5)]))
    assert response.status_code == 202, response.content

    # for an existing host: a second token, no second host
    out, _ = run_command("issue_token", "dgx-new")
    second = out.strip().splitlines()[-1]
    assert second != token and HOST_TOKEN.match(second)
    assert Host.objects.filter(hostname="dgx-new").count() == 1
    assert HostToken.objects.filter(host=host).count() == 2


def test_issue_token_with_an_invalid_hostname_is_a_command_error(db):
    with pytest.raises(CommandError):
        run_command("issue_token", "x" * 300)
    assert not Host.objects.exists()


def test_create_api_token_prints_a_token_that_authenticates(db):
    user = UserFactory(username="dana", role="viewer")
    out, err = run_command("create_api_token", "dana", "--label", "grafana")
    token = out.strip().splitlines()[-1]
    assert USER_TOKEN.match(token)
    assert token not in err
    assert ApiToken.objects.get(user=user).label == "grafana"
    response = Client().get("/api/v1/gpus", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200


def test_create_api_token_for_an_unknown_or_inactive_user_is_a_command_error(db):
    with pytest.raises(CommandError, match="nobody"):
        run_command("create_api_token", "nobody")
    UserFactory(username="gone", is_active=False)
    with pytest.raises(CommandError):
        run_command("create_api_token", "gone")
    assert not ApiToken.objects.exists()
