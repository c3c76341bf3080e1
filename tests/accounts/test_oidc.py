"""Sign-in with an OpenID Connect provider (portal-api-v1.md, "Sign-in for lab accounts"),
against a real one (oidc-provider, started by the tests): authorization code with PKCE, state and
nonce, the role from the `groups` claim at every sign-in, refusals, logout."""

import re
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client

from portal.accounts.models import AccountEvent, ApiToken, Source
from portal.accounts.services import api_token_issue
from portal.demo.directory import free_port
from tests.accounts.conftest import OIDC_CLIENT_SECRET, OIDC_PEOPLE, oidc_configure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()


def provider_round_trip(authorize_url: str, username: str, password: str) -> requests.Response:
    """What the browser does at the provider: follow its redirects, fill in its login form, until
    it sends the browser back to the portal (returned, not followed)."""
    browser = requests.Session()
    response = browser.get(authorize_url, allow_redirects=False, timeout=10)
    for _ in range(10):
        if response.is_redirect:
            target = urljoin(response.url, response.headers["Location"])
            if target.startswith("http://testserver/"):
                return response
            response = browser.get(target, allow_redirects=False, timeout=10)
        elif response.status_code in (200, 401) and 'name="password"' in response.text:
            if response.status_code == 401:
                return response  # the provider refused the password
            action = re.search(r'action="([^"]+)"', response.text).group(1)
            response = browser.post(
                urljoin(response.url, action),
                data={"login": username, "password": password},
                allow_redirects=False,
                timeout=10,
            )
            if response.status_code == 401:
                return response
        else:
            raise AssertionError(f"unexpected answer from the provider: {response.status_code} {response.text[:500]}")
    raise AssertionError("too many redirects at the provider")


def start(client):
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 302, response.content[:500]
    return response["Location"]


def sign_in(username, password=None, client=None, before_callback=None):
    client = client or Client()
    back = provider_round_trip(start(client), username, password or OIDC_PEOPLE[username][0])
    assert back.is_redirect, back.text[:500]
    callback = urlsplit(back.headers["Location"])
    if before_callback is not None:
        before_callback(client, callback)
    return client, client.get(f"{callback.path}?{callback.query}")


def roles_of(user):
    return set(user.groups.values_list("name", flat=True))


def test_the_login_page_offers_the_provider(oidc_on):
    page = Client().get("/login/").content.decode()
    assert "Sign in with 127.0.0.1" in page and 'href="/oidc/authenticate/"' in page


def test_the_request_carries_pkce_state_and_nonce(oidc_on):
    query = parse_qs(urlsplit(start(Client())).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert len(query["state"][0]) >= 32 and len(query["nonce"][0]) >= 32
    assert query["client_id"] == ["portal"] and query["response_type"] == ["code"]


@pytest.mark.parametrize(("username", "role"), [("alice", "admin"), ("terry", "technician"), ("vera", "viewer")])
def test_each_role_value_signs_in_with_its_role(oidc_on, username, role):
    client, response = sign_in(username)
    assert response.status_code == 302 and response["Location"] == "/", response.content.decode()[:2000]
    user = User.objects.get(username=username)
    assert roles_of(user) == {role}
    assert user.profile.source == Source.OIDC
    assert user.profile.directory_id == f"{oidc_on.issuer}|{username}"
    assert (user.email, user.first_name) == (f"{username}@lab.example", username.title())
    assert not user.has_usable_password()
    account = client.get("/account/")
    assert account.status_code == 200 and "You sign in with 127.0.0.1" in account.content.decode()
    events = list(AccountEvent.objects.filter(user=user).order_by("id").values_list("kind", "source"))
    assert events == [("role_change", "oidc"), ("sign_in", "oidc")]


def test_a_wrong_password_is_refused_on_the_providers_page(oidc_on):
    client = Client()
    answer = provider_round_trip(start(client), "alice", "not-alices")
    assert answer.status_code == 401 and "Wrong user name or password." in answer.text
    assert not User.objects.filter(username="alice").exists()


def test_no_role_value_is_refused_with_a_message_and_creates_no_one(oidc_on):
    client, response = sign_in("olga")
    assert response.status_code == 403
    assert "not in any of the portal&#x27;s role groups" in response.content.decode()
    assert not User.objects.filter(username="olga").exists()
    assert client.get("/account/").status_code == 302
    event = AccountEvent.objects.get()
    assert (event.kind, event.source, event.reason, event.username) == ("refused", "oidc", "no_role", "olga")


def test_the_claim_is_read_again_at_every_sign_in_and_losing_it_ends_everything(oidc_on):
    open_session, _ = sign_in("terry")
    terry = User.objects.get(username="terry")
    assert roles_of(terry) == {"technician"}
    secret, _ = api_token_issue(user=terry)

    oidc_on.groups_set("terry", ["portal-viewers", "portal-admins"])
    sign_in("terry")
    assert roles_of(terry) == {"admin"}  # the highest that matches
    change = AccountEvent.objects.filter(user=terry, kind="role_change").latest("id")
    assert (change.role_before, change.role_after, change.source) == ("technician", "admin", "oidc")

    oidc_on.groups_set("terry", [])
    _, refused = sign_in("terry")
    assert refused.status_code == 403
    terry.refresh_from_db()
    assert not terry.is_active and roles_of(terry) == set()
    assert open_session.get("/account/").status_code == 302
    assert Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 401
    assert ApiToken.objects.get(user=terry).revoked_at is not None

    oidc_on.groups_set("terry", ["portal-techs"])
    _, response = sign_in("terry")
    assert response.status_code == 302
    terry.refresh_from_db()
    assert terry.is_active and roles_of(terry) == {"technician"}


def test_a_wrong_state_is_refused(oidc_on):
    def forge_state(client, callback):
        query = parse_qs(callback.query)
        query["state"] = ["forged-" + query["state"][0][7:]]
        callback_forged[0] = "&".join(f"{k}={v[0]}" for k, v in query.items())

    callback_forged = [""]
    client = Client()
    back = provider_round_trip(start(client), "alice", OIDC_PEOPLE["alice"][0])
    callback = urlsplit(back.headers["Location"])
    forge_state(client, callback)
    response = client.get(f"{callback.path}?{callback_forged[0]}")
    assert response.status_code == 400
    assert "stale or was not started here" in response.content.decode()
    assert client.get("/account/").status_code == 302
    assert not User.objects.filter(username="alice").exists()
    assert AccountEvent.objects.get().reason == "state"


def test_a_callback_without_a_started_sign_in_is_refused(oidc_on):
    response = Client().get("/oidc/callback/?code=abc&state=never-started")
    assert response.status_code == 400
    assert AccountEvent.objects.get().reason == "state"


def test_a_pkce_verifier_that_does_not_match_is_refused_by_the_provider(oidc_on, caplog):
    def swap_verifier(client, callback):
        session = client.session
        state = parse_qs(callback.query)["state"][0]
        session["oidc_states"][state]["code_verifier"] = "x" * 64  # not the one the challenge was made from
        session.save()

    client, response = sign_in("alice", before_callback=swap_verifier)
    assert response.status_code == 400
    assert "refused the sign-in" in response.content.decode()
    assert client.get("/account/").status_code == 302
    assert not User.objects.filter(username="alice").exists()
    assert AccountEvent.objects.get().reason == "provider_refused"
    assert OIDC_CLIENT_SECRET not in caplog.text and "x" * 64 not in caplog.text  # no secret in the log


def test_logout_also_signs_out_at_the_provider(oidc_on):
    client, _ = sign_in("vera")
    response = client.post("/logout/")
    assert response.status_code == 302
    target = urlsplit(response["Location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{oidc_on.issuer}/session/end"
    query = parse_qs(target.query)
    assert query["client_id"] == ["portal"] and query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert client.get("/account/").status_code == 302


def test_a_local_account_logs_out_locally(oidc_on, client_for, viewer):
    assert client_for(viewer).post("/logout/")["Location"] == "/login/"


def test_a_provider_that_does_not_answer_says_so_and_local_accounts_still_sign_in(settings, oidc_provider):
    oidc_configure(settings, oidc_provider.environ(OIDC_ISSUER=f"http://127.0.0.1:{free_port()}"))
    response = Client().get("/oidc/authenticate/")
    assert response.status_code == 503
    assert "The sign-in provider did not answer" in response.content.decode()
    local = UserFactory(username="local-admin", is_superuser=True)
    local.set_password("break-glass-7")
    local.save()
    assert Client().post("/login/", {"username": "local-admin", "password": "break-glass-7"}).status_code == 302


def test_off_without_an_issuer(settings):
    settings.OIDC_ENABLED = False
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert Client().get("/oidc/callback/?code=a&state=b").status_code == 404
    assert "Sign in with" not in Client().get("/login/").content.decode()


def test_oidc_sign_in_works_with_login_throttling_on(oidc_on, settings):
    settings.AXES_ENABLED = True
    _, response = sign_in("vera")
    assert response.status_code == 302


def test_a_provider_that_answers_with_an_error_is_refused(oidc_on):
    client = Client()
    state = parse_qs(urlsplit(start(client)).query)["state"][0]
    response = client.get(f"/oidc/callback/?error=access_denied&state={state}")
    assert response.status_code == 400
    assert "refused the sign-in" in response.content.decode()
    assert AccountEvent.objects.get().reason == "provider_refused"
    assert state not in client.session.get("oidc_states", {})  # that state cannot be used again


def test_the_discovery_document_is_kept_until_the_oidc_settings_change(oidc_on, settings):
    from portal.accounts.directory.oidc import ProviderUnavailable, oidc_discovery

    first = oidc_discovery()
    assert oidc_discovery() is first  # kept, not fetched again
    settings.OIDC_TIMEOUT = settings.OIDC_TIMEOUT + 1
    again = oidc_discovery()
    assert again is not first and again == first
    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ProviderUnavailable, match="discovery failed"):
        oidc_discovery()  # the new issuer is asked, not the old one's document returned
