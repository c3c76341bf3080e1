"""An OIDC account's role is read again from the provider while it is signed in, not only at its
next sign-in (portal-api-v1.md, "Sign-in for lab accounts": a lost role ends the open sessions
within LIVE_RECHECK_S and stops the personal API tokens at once). Against the real test provider,
whose people's groups the tests change while a session is open."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from portal.accounts.models import AccountEvent, ApiToken, UserProfile
from portal.accounts.services import api_token_issue
from portal.demo.directory import free_port
from tests.accounts.conftest import oidc_configure
from tests.accounts.test_oidc import roles_of, sign_in

pytestmark = pytest.mark.django_db
User = get_user_model()


def token_get(secret):
    return Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=f"Token {secret}")


@pytest.fixture
def recheck_every_request(settings):
    settings.LIVE_RECHECK_S = 0


def test_a_role_lost_at_the_provider_ends_the_open_session_and_revokes_the_tokens(oidc_on, recheck_every_request):
    session, _ = sign_in("terry")
    terry = User.objects.get(username="terry")
    secret, _ = api_token_issue(user=terry)
    assert session.get("/account/").status_code == 200 and token_get(secret).status_code == 200

    oidc_on.groups_set("terry", ["lab-staff"])
    assert session.get("/account/").status_code == 302  # signed out: the login page
    answer = token_get(secret)
    assert answer.status_code == 401 and "revoked" in answer.json()["error"]
    terry.refresh_from_db()
    assert not terry.is_active and roles_of(terry) == set()
    assert ApiToken.objects.get(user=terry).revoked_at is not None
    change = AccountEvent.objects.filter(user=terry).latest("id")
    assert (change.kind, change.source, change.role_before, change.role_after) == (
        "role_change",
        "oidc",
        "technician",
        "",
    )


def test_a_token_alone_is_checked_too(oidc_on, recheck_every_request):
    """No browser open: the token's own use asks the provider."""
    sign_in("vera")
    vera = User.objects.get(username="vera")
    secret, _ = api_token_issue(user=vera)
    oidc_on.groups_set("vera", [])
    assert token_get(secret).status_code == 401
    vera.refresh_from_db()
    assert not vera.is_active and ApiToken.objects.get(user=vera).revoked_at is not None


def test_the_provider_is_asked_again_only_after_live_recheck_s(oidc_on, settings):
    settings.LIVE_RECHECK_S = 1
    session, _ = sign_in("terry")
    oidc_on.groups_set("terry", [])
    assert session.get("/account/").status_code == 200  # vouched for by the sign-in a moment ago
    time.sleep(1.1)
    assert session.get("/account/").status_code == 302


def test_a_role_changed_at_the_provider_applies_without_a_sign_in(oidc_on, recheck_every_request):
    session, _ = sign_in("terry")
    oidc_on.groups_set("terry", ["portal-viewers"])
    assert session.get("/account/").status_code == 200
    terry = User.objects.get(username="terry")
    assert roles_of(terry) == {"viewer"}
    change = AccountEvent.objects.filter(user=terry, kind="role_change").latest("id")
    assert (change.source, change.role_before, change.role_after) == ("oidc", "technician", "viewer")


def test_an_account_the_provider_no_longer_knows_is_signed_out_and_its_tokens_refused(oidc_on, recheck_every_request):
    """The refresh token refused (the account deleted at the provider, its grant revoked or run
    out): nothing vouches for the role any more. The account is not revoked (its role may be
    intact); a new sign-in vouches for it again."""
    session, _ = sign_in("terry")
    terry = User.objects.get(username="terry")
    secret, _ = api_token_issue(user=terry)
    person = oidc_on.people.pop("terry")
    oidc_on.people_file.write_text(__import__("json").dumps(oidc_on.people))

    assert session.get("/account/").status_code == 302
    answer = token_get(secret)
    assert answer.status_code == 401 and "sign in to the portal again" in answer.json()["error"]
    refusals = AccountEvent.objects.filter(user=terry, kind="refused")
    assert refusals.count() == 2 and {(e.source, e.reason) for e in refusals} == {("oidc", "provider_refused")}
    terry.refresh_from_db()
    assert terry.is_active and roles_of(terry) == {"technician"}

    oidc_on.people["terry"] = person
    oidc_on.people_file.write_text(__import__("json").dumps(oidc_on.people))
    again, _ = sign_in("terry")
    assert again.get("/account/").status_code == 200 and token_get(secret).status_code == 200


def test_a_provider_that_does_not_answer_revokes_no_one(oidc_on, settings, recheck_every_request):
    """As for LDAP: an outage of the provider must not sign the whole lab out."""
    session, _ = sign_in("terry")
    oidc_configure(settings, oidc_on.environ(OIDC_ISSUER=f"http://127.0.0.1:{free_port()}"))
    assert session.get("/account/").status_code == 200


def test_without_a_refresh_token_the_session_lasts_as_long_as_the_id_token(oidc_on, settings, recheck_every_request):
    """Some providers give no refresh token: the portal cannot ask again, so the sign-in holds only
    as long as the provider said its ID token does (the user then signs in again)."""
    oidc_configure(settings, oidc_on.environ(OIDC_CLIENT_ID="portal-no-refresh"))
    session, _ = sign_in("terry")
    terry = User.objects.get(username="terry")
    secret, _ = api_token_issue(user=terry)
    assert session.get("/account/").status_code == 200 and token_get(secret).status_code == 200

    # The ID token's hour has passed.
    UserProfile.objects.filter(user=terry).update(directory_vouched_until=None)
    assert token_get(secret).status_code == 401
    assert session.get("/account/").status_code == 302
