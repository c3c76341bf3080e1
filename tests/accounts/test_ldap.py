"""Sign-in with the lab's LDAP directory (portal-api-v1.md, "Sign-in for lab accounts"), against
a real slapd: the role from the groups at every sign-in, refusals that say why and create
nothing, a lost group that ends sessions and API tokens, a directory down within 5 s."""

import logging
import socket
import time
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from portal.accounts.models import AccountEvent, ApiToken, Source
from portal.accounts.roles import ROLE_ADMIN
from portal.accounts.services import api_token_issue
from portal.demo.directory import DEMO_PEOPLE, free_port
from tests.accounts.conftest import ldap_configure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
User = get_user_model()


def sign_in(username, password, client=None):
    client = client or Client()
    return client, client.post("/login/", {"username": username, "password": password})


def roles_of(user):
    return set(user.groups.values_list("name", flat=True))


@pytest.mark.parametrize("username", ["ada", "tess", "vic"])
def test_each_role_group_signs_in_with_its_role_name_and_mail(ldap_on, username):
    password, given, surname, role = DEMO_PEOPLE[username]
    client, response = sign_in(username, password)
    assert response.status_code == 302, response.content.decode()[:2000]
    user = User.objects.get(username=username)
    assert roles_of(user) == {role}
    assert (user.first_name, user.last_name, user.email) == (given, surname, f"{username}@lab.example")
    assert user.profile.source == Source.LDAP
    assert user.profile.directory_id == f"uid={username},ou=people,dc=lab,dc=example"
    assert not user.has_usable_password()  # the directory's password is stored nowhere
    account = client.get("/account/")
    assert account.status_code == 200 and "You sign in with the lab directory (LDAP)" in account.content.decode()
    kinds = list(AccountEvent.objects.filter(user=user).order_by("id").values_list("kind", "source", "role_after"))
    assert kinds == [("role_change", "ldap", role), ("sign_in", "ldap", "")]


def test_wrong_password_is_refused_and_creates_no_one(ldap_on):
    _, response = sign_in("ada", "not-her-password")
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert not User.objects.filter(username="ada").exists()
    event = AccountEvent.objects.get()
    assert (event.kind, event.username, event.reason) == ("refused", "ada", "credentials")


def test_a_person_in_no_role_group_is_refused_with_a_message_saying_so(ldap_on):
    _, response = sign_in("nora", DEMO_PEOPLE["nora"][0])
    page = response.content.decode()
    assert response.status_code == 200
    assert "not in any of the portal&#x27;s role groups" in page
    assert not User.objects.filter(username="nora").exists()
    event = AccountEvent.objects.get()
    assert (event.kind, event.source, event.reason) == ("refused", "ldap", "no_role")


def test_groups_are_read_again_at_every_sign_in(ldap_on):
    password = DEMO_PEOPLE["tess"][0]
    sign_in("tess", password)
    tess = User.objects.get(username="tess")
    assert roles_of(tess) == {"technician"}

    ldap_on.member_set("technician", [])
    ldap_on.member_set("admin", ["ada", "tess"])
    _, response = sign_in("tess", password)
    assert response.status_code == 302
    assert roles_of(tess) == {"admin"}
    change = AccountEvent.objects.filter(user=tess, kind="role_change").latest("id")
    assert (change.role_before, change.role_after, change.source) == ("technician", "admin", "ldap")

    # In two groups: the highest wins.
    ldap_on.member_set("viewer", ["vic", "tess"])
    sign_in("tess", password)
    assert roles_of(tess) == {"admin"}


def test_losing_every_group_refuses_the_next_sign_in_and_ends_sessions_and_tokens(ldap_on):
    password = DEMO_PEOPLE["vic"][0]
    open_session, response = sign_in("vic", password)
    assert response.status_code == 302
    vic = User.objects.get(username="vic")
    secret, _ = api_token_issue(user=vic, label="ci")
    assert Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 200

    ldap_on.member_set("viewer", [])
    _, refused = sign_in("vic", password)
    assert "not in any of the portal&#x27;s role groups" in refused.content.decode()
    vic.refresh_from_db()
    assert not vic.is_active and roles_of(vic) == set()
    assert vic.profile.directory_revoked_at is not None
    # The session opened before ends at its next request; the token is revoked.
    assert open_session.get("/account/").status_code == 302
    assert Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 401
    assert ApiToken.objects.get(user=vic).revoked_at is not None
    demotion = AccountEvent.objects.filter(user=vic, kind="role_change").latest("id")
    assert (demotion.role_before, demotion.role_after) == ("viewer", "")

    # Back in a group: back in, with a fresh session (the old token stays revoked).
    ldap_on.member_set("viewer", ["vic"])
    client, response = sign_in("vic", password)
    assert response.status_code == 302
    vic.refresh_from_db()
    assert vic.is_active and roles_of(vic) == {"viewer"} and vic.profile.directory_revoked_at is None


def test_an_account_an_admin_deactivated_is_not_brought_back_by_the_directory(ldap_on):
    sign_in("vic", DEMO_PEOPLE["vic"][0])
    User.objects.filter(username="vic").update(is_active=False)
    _, response = sign_in("vic", DEMO_PEOPLE["vic"][0])
    assert "deactivated by an admin" in response.content.decode()
    assert not User.objects.get(username="vic").is_active


def test_the_directory_never_takes_over_a_local_account_of_the_same_name(ldap_on):
    local = UserFactory(username="ada", role=ROLE_ADMIN, is_superuser=True)
    local.set_password("local-secret-9")
    local.save()
    _, response = sign_in("ada", DEMO_PEOPLE["ada"][0])
    assert "A local account of the portal has this name" in response.content.decode()
    local.refresh_from_db()
    assert local.has_usable_password() and local.check_password("local-secret-9")
    # Its own password still works (break-glass).
    _, response = sign_in("ada", "local-secret-9")
    assert response.status_code == 302
    assert AccountEvent.objects.filter(kind="sign_in").get().source == Source.LOCAL


def _blackhole():
    """A listening socket that accepts connections (the kernel does) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


@pytest.mark.serial
@pytest.mark.parametrize("kind", ["nobody listening", "blackhole"])
def test_a_directory_that_does_not_answer_fails_within_5_s_and_local_accounts_still_sign_in(
    settings, directory, kind, caplog
):
    hole = _blackhole() if kind == "blackhole" else None
    port = hole.getsockname()[1] if hole else free_port()
    try:
        ldap_configure(settings, {**directory.settings(), "LDAP_SERVER_URI": f"ldap://127.0.0.1:{port}"})
        started = time.monotonic()
        _, response = sign_in("ada", DEMO_PEOPLE["ada"][0])
        elapsed = time.monotonic() - started
        assert elapsed < 5, elapsed
        assert "The lab directory did not answer" in response.content.decode()
        assert AccountEvent.objects.get().reason == "directory_unavailable"

        breakglass = UserFactory(username="root-local", is_superuser=True)
        breakglass.set_password("break-glass-7")
        breakglass.save()
        _, response = sign_in("root-local", "break-glass-7")
        assert response.status_code == 302
    finally:
        if hole:
            hole.close()


def test_nothing_logged_holds_a_password(ldap_on, caplog):
    caplog.set_level(logging.DEBUG)
    sign_in("ada", DEMO_PEOPLE["ada"][0])
    sign_in("tess", "a-wrong-guess-123")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in (DEMO_PEOPLE["ada"][0], "a-wrong-guess-123", ldap_on.root_password):
        assert secret not in logged
    assert "ada" in logged  # the log did say something about the sign-in


def test_the_sync_ends_sessions_of_accounts_that_lost_their_groups_without_waiting_for_a_sign_in(ldap_on):
    vic_session, _ = sign_in("vic", DEMO_PEOPLE["vic"][0])
    sign_in("tess", DEMO_PEOPLE["tess"][0])
    secret, _ = api_token_issue(user=User.objects.get(username="vic"))
    ldap_on.member_set("viewer", [])
    ldap_on.member_set("admin", ["ada", "tess"])

    out = StringIO()
    call_command("directory_sync", stdout=out)
    assert "2 LDAP accounts checked: 1 role changes, 1 revoked." in out.getvalue()
    assert not User.objects.get(username="vic").is_active
    assert vic_session.get("/account/").status_code == 302
    assert Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 401
    assert roles_of(User.objects.get(username="tess")) == {"admin"}


def test_a_lost_group_ends_the_session_and_the_token_within_live_recheck_s(ldap_on, settings):
    """No sync, no sign-in: the session's and the token's own next use after LIVE_RECHECK_S asks."""
    settings.LIVE_RECHECK_S = 1
    vic_session, _ = sign_in("vic", DEMO_PEOPLE["vic"][0])
    tess_session, _ = sign_in("tess", DEMO_PEOPLE["tess"][0])
    secret, _ = api_token_issue(user=User.objects.get(username="vic"))
    ldap_on.member_set("viewer", [])
    ldap_on.member_set("admin", ["ada", "tess"])
    assert vic_session.get("/account/").status_code == 200  # the sign-in vouches for a moment

    time.sleep(1.1)
    assert vic_session.get("/account/").status_code == 302
    assert Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 401
    vic = User.objects.get(username="vic")
    assert not vic.is_active and ApiToken.objects.get(user=vic).revoked_at is not None
    assert tess_session.get("/account/").status_code == 200
    assert roles_of(User.objects.get(username="tess")) == {"admin"}
    changes = AccountEvent.objects.filter(kind="role_change", source="ldap").order_by("-id")
    assert {(e.username, e.role_before, e.role_after) for e in changes[:2]} == {
        ("vic", "viewer", ""),
        ("tess", "technician", "admin"),
    }


def test_a_recheck_while_the_directory_is_down_keeps_the_session(settings, ldap_on):
    settings.LIVE_RECHECK_S = 0
    session, _ = sign_in("vic", DEMO_PEOPLE["vic"][0])
    ldap_configure(settings, {**ldap_on.settings(), "LDAP_SERVER_URI": f"ldap://127.0.0.1:{free_port()}"})
    assert session.get("/account/").status_code == 200


def test_a_sync_while_the_directory_is_down_changes_nothing(settings, ldap_on):
    sign_in("vic", DEMO_PEOPLE["vic"][0])
    ldap_configure(settings, {**ldap_on.settings(), "LDAP_SERVER_URI": f"ldap://127.0.0.1:{free_port()}"})
    with pytest.raises(CommandError, match="did not answer"):
        call_command("directory_sync")
    vic = User.objects.get(username="vic")
    assert vic.is_active and roles_of(vic) == {"viewer"}


def test_directory_sign_ins_are_throttled_like_local_ones(ldap_on, settings):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    assert sign_in("ada", DEMO_PEOPLE["ada"][0], client)[1].status_code == 302
    for _ in range(2):
        assert sign_in("tess", "guess", Client())[1].status_code == 200
    assert sign_in("tess", "guess", Client())[1].status_code == 429  # the third failure locks
    locked = sign_in("tess", DEMO_PEOPLE["tess"][0], Client())[1]
    assert locked.status_code == 429  # the right password too
    assert not User.objects.filter(username="tess").exists()


def test_starttls_that_the_directory_cannot_do_fails_closed(settings, directory):
    # This slapd has no certificate: with StartTLS asked for, no password crosses in clear.
    ldap_configure(settings, directory.settings())
    settings.LDAP_START_TLS = settings.AUTH_LDAP_START_TLS = True  # as for a directory off this machine
    _, response = sign_in("ada", DEMO_PEOPLE["ada"][0])
    assert "The lab directory did not answer" in response.content.decode()
    assert not User.objects.filter(username="ada").exists()
