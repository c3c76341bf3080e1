"""Password guessing on /login/ and /admin/login/ is throttled (django-axes), and an admin lifts a lockout.

The suite turns axes off (tests log in all the time); these tests turn it on."""

import pytest
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"  # tests/factories.py


@pytest.fixture(autouse=True)
def _axes_on(settings):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3


def _login(client, url, username, password):
    return client.post(url, {"username": username, "password": password})


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_locked_out_after_the_limit_even_with_the_right_password(url, admin):
    client = Client()
    for _ in range(2):
        assert _login(client, url, "alice", "wrong").status_code == 200
    assert _login(client, url, "alice", "wrong").status_code == 429  # the third failure locks
    locked = _login(client, url, "alice", PASSWORD)
    assert locked.status_code == 429
    assert b"Too many failed logins" in locked.content
    assert "_auth_user_id" not in client.session


def test_failures_elsewhere_do_not_lock_a_user_out(admin):
    """Anyone failing as `alice` from their own address locks that address, not alice everywhere."""
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(3):
        _login(attacker, "/login/", "alice", "wrong")
    assert _login(attacker, "/login/", "alice", PASSWORD).status_code == 429
    assert _login(Client(REMOTE_ADDR="198.51.100.7"), "/login/", "alice", PASSWORD).status_code == 302


def test_an_address_guessing_many_names_is_locked(admin):
    guesser = Client(REMOTE_ADDR="203.0.113.10")
    for number in range(3):
        _login(guesser, "/login/", f"user{number}", "wrong")
    assert _login(guesser, "/login/", "alice", PASSWORD).status_code == 429
    assert _login(Client(REMOTE_ADDR="198.51.100.8"), "/login/", "alice", PASSWORD).status_code == 302


def test_spread_guesses_for_one_name_are_counted_per_address(admin):
    for number in range(3):
        _login(Client(REMOTE_ADDR=f"203.0.113.{number}"), "/login/", "alice", "wrong")
    assert _login(Client(REMOTE_ADDR="198.51.100.7"), "/login/", "alice", PASSWORD).status_code == 302


def test_forged_forwarded_for_headers_do_not_reset_the_count(viewer):
    for number in range(3):
        Client(HTTP_X_FORWARDED_FOR=f"203.0.113.{number}").post("/login/", {"username": f"u{number}", "password": "x"})
    # Three failures from one real address (REMOTE_ADDR): the address is locked whatever the header says.
    answer = Client(HTTP_X_FORWARDED_FOR="192.0.2.1").post("/login/", {"username": "charlie", "password": PASSWORD})
    assert answer.status_code == 429


def test_success_resets_the_count(viewer):
    client = Client()
    for _ in range(2):
        _login(client, "/login/", "charlie", "wrong")
    assert _login(client, "/login/", "charlie", PASSWORD).status_code == 302
    client = Client()
    for _ in range(2):
        _login(client, "/login/", "charlie", "wrong")
    assert _login(client, "/login/", "charlie", PASSWORD).status_code == 302


def test_the_admin_lifts_a_lockout(admin, viewer):
    for _ in range(3):
        _login(Client(), "/login/", "charlie", "wrong")
    assert _login(Client(), "/login/", "charlie", PASSWORD).status_code == 429
    call_command("axes_reset_username", "charlie")
    assert _login(Client(), "/login/", "charlie", PASSWORD).status_code == 302


def test_the_admin_sees_and_deletes_lockouts_in_the_admin_site(admin, viewer):
    from axes.models import AccessAttempt

    for _ in range(3):
        _login(Client(), "/login/", "charlie", "wrong")
    staff = Client()
    staff.force_login(admin)
    listing = staff.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and b"charlie" in listing.content
    attempt = AccessAttempt.objects.get(username="charlie")
    answer = staff.post(f"/admin/axes/accessattempt/{attempt.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302
    assert _login(Client(), "/login/", "charlie", PASSWORD).status_code == 302
