"""Personal API tokens: an optional expiry offered on the account page (30/90/365 days), "last
used" shown, and every token of a user revoked when someone else sets their password or they are
deactivated."""

import datetime as dt
import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from portal.accounts.models import ApiToken
from portal.accounts.services import api_token_authenticate, api_token_issue
from portal.core.errors import InvalidInput

pytestmark = pytest.mark.django_db


def api_get(secret):
    return Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=f"Token {secret}")


@pytest.mark.parametrize("days", [30, 90, 365])
def test_account_page_mints_a_token_that_expires(client_for, viewer, days):
    response = client_for(viewer).post("/account/", {"label": "ci", "expires_in_days": str(days)})
    assert response.status_code == 201
    token = ApiToken.objects.get(user=viewer)
    assert token.expires_at - timezone.now() == pytest.approx(dt.timedelta(days=days), abs=dt.timedelta(minutes=1))
    page = client_for(viewer).get("/account/").content.decode()
    assert f"{token.expires_at:%Y-%m-%d}" in page


def in_days(token) -> dt.timedelta:
    return token.expires_at - timezone.now()


def test_a_new_token_expires_in_90_days_by_default(client_for, viewer):
    page = client_for(viewer).get("/account/").content.decode()
    assert '<option value="90" selected>' in page and "never" not in page.split('name="expires_in_days"')[1][:400]
    assert client_for(viewer).post("/account/", {"label": "ci"}).status_code == 201  # no choice: the default
    _, token = api_token_issue(user=viewer)
    for token in ApiToken.objects.all():
        assert in_days(token) == pytest.approx(dt.timedelta(days=90), abs=dt.timedelta(minutes=1))


@pytest.mark.parametrize("role", ["technician", "viewer"])
def test_only_an_admin_may_choose_never(client_for, actors, admin, role):
    user = actors[role]
    response = client_for(user).post("/account/", {"label": "forever", "expires_in_days": ""})
    assert response.status_code == 400 and "expires_in_days" in response.content.decode()
    with pytest.raises(InvalidInput) as refused:
        api_token_issue(user=user, expires_in_days=None)
    assert "expires_in_days" in refused.value.field_errors
    assert not ApiToken.objects.exists()
    assert client_for(admin).post("/account/", {"label": "forever", "expires_in_days": ""}).status_code == 201
    assert ApiToken.objects.get(user=admin).expires_at is None


def test_create_api_token_command_defaults_to_90_days_and_never_on_request(viewer):
    call_command("create_api_token", viewer.username, stdout=io.StringIO(), stderr=io.StringIO())
    call_command("create_api_token", viewer.username, "--never-expires", stdout=io.StringIO(), stderr=io.StringIO())
    call_command("create_api_token", viewer.username, "--expires-in-days", "7", stdout=io.StringIO(),
                 stderr=io.StringIO())  # fmt: skip
    lifetimes = [t.expires_at and round(in_days(t) / dt.timedelta(days=1)) for t in ApiToken.objects.order_by("pk")]
    assert lifetimes == [90, None, 7]
    with pytest.raises(CommandError):
        call_command("create_api_token", viewer.username, "--expires-in-days", "0", stderr=io.StringIO())


@pytest.mark.parametrize("bad", ["7", "0", "-30", "abc", "3650"])
def test_an_expiry_not_offered_is_a_400_naming_the_field(client_for, viewer, bad):
    response = client_for(viewer).post("/account/", {"label": "x", "expires_in_days": bad})
    assert response.status_code == 400
    assert "expires_in_days" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_an_expired_token_is_refused_with_a_clear_401(viewer):
    secret, token = api_token_issue(user=viewer, expires_in_days=30)
    assert api_get(secret).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    answer = api_get(secret)
    assert answer.status_code == 401
    assert "expired" in answer.json()["error"]
    assert api_token_authenticate(secret) is None


def test_last_used_is_recorded_and_shown(client_for, viewer):
    secret, token = api_token_issue(user=viewer)
    assert "never" in client_for(viewer).get("/account/").content.decode()
    api_get(secret)
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert f"{token.last_used_at:%Y-%m-%d %H:%M}" in client_for(viewer).get("/account/").content.decode()


def test_deactivating_a_user_revokes_their_tokens(viewer):
    secret, _ = api_token_issue(user=viewer)
    viewer.is_active = False
    viewer.save()
    viewer.is_active = True  # reactivated: the old tokens stay revoked
    viewer.save()
    assert api_token_authenticate(secret) is None
    assert ApiToken.objects.get(user=viewer).revoked_at is not None


def test_an_admin_setting_the_password_in_the_admin_site_revokes_the_tokens(client_for, admin, viewer):
    secret, _ = api_token_issue(user=viewer)
    other_secret, _ = api_token_issue(user=admin)
    answer = client_for(admin).post(
        f"/admin/auth/user/{viewer.pk}/password/",
        {"password1": "a new long passphrase 42", "password2": "a new long passphrase 42", "usable_password": "true"},
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    assert api_token_authenticate(secret) is None
    assert api_token_authenticate(other_secret) == admin


def test_an_admin_deactivating_in_the_admin_site_revokes_the_tokens(client_for, admin, viewer):
    secret, _ = api_token_issue(user=viewer)
    change = client_for(admin).get(f"/admin/auth/user/{viewer.pk}/change/")
    form = change.context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and name != "password"}
    data.update({"groups": [g.pk for g in viewer.groups.all()], "date_joined_0": "2026-01-01",
                 "date_joined_1": "00:00:00", "user_permissions": []})  # fmt: skip
    data.pop("is_active", None)  # an unticked box is absent
    answer = client_for(admin).post(f"/admin/auth/user/{viewer.pk}/change/", data)
    assert answer.status_code == 302, answer.content.decode()[:3000]
    viewer.refresh_from_db()
    assert viewer.is_active is False
    assert api_token_authenticate(secret) is None


def test_a_password_set_on_the_server_revokes_the_tokens(viewer):
    secret, _ = api_token_issue(user=viewer)
    viewer.set_password("another long passphrase 7")  # as manage.py changepassword does, outside a request
    viewer.save()
    assert api_token_authenticate(secret) is None


def test_the_user_setting_their_own_password_keeps_their_tokens(viewer):
    from auditlog.context import set_actor

    secret, _ = api_token_issue(user=viewer)
    with set_actor(viewer):
        viewer.set_password("my own new passphrase 9")
        viewer.save()
    assert api_token_authenticate(secret) == viewer


def test_logging_in_changes_nothing(viewer):
    secret, _ = api_token_issue(user=viewer)
    assert (
        Client().post("/login/", {"username": "charlie", "password": "correct horse battery staple"}).status_code == 302
    )
    assert api_token_authenticate(secret) == viewer


def test_a_login_that_rehashes_the_password_keeps_the_tokens(viewer, settings):
    """Django stores the same password again under the preferred hasher when the user logs in (after
    every upgrade that raises the iteration count): that is no password change."""
    from django.contrib.auth.hashers import make_password

    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]
    old_hash = make_password("correct horse battery staple", hasher="md5")
    type(viewer).objects.filter(pk=viewer.pk).update(password=old_hash)
    secret, _ = api_token_issue(user=viewer)

    answer = Client().post("/login/", {"username": "charlie", "password": "correct horse battery staple"})

    assert answer.status_code == 302
    viewer.refresh_from_db()
    assert viewer.password != old_hash and viewer.password.startswith("pbkdf2_sha256$")  # it was rehashed
    assert api_token_authenticate(secret) == viewer


def test_an_admin_disabling_password_login_revokes_the_tokens(viewer):
    secret, _ = api_token_issue(user=viewer)
    viewer.set_unusable_password()
    viewer.save(update_fields=["password"])
    assert api_token_authenticate(secret) is None


def test_a_finished_audit_block_does_not_pass_for_the_users_own_change(viewer):
    """django-auditlog leaves the actor of a finished `set_actor` block in its context variable; a
    password set afterwards on the server is still someone else's, and revokes the tokens."""
    from auditlog.context import set_actor

    with set_actor(viewer):
        pass
    secret, _ = api_token_issue(user=viewer)
    viewer.set_password("set later by an operator 4")
    viewer.save()
    assert api_token_authenticate(secret) is None
