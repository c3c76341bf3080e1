"""A directory account that loses every role group: its open live sockets close at once (the
portal learns it at a sign-in attempt, the LDAP sync, or the socket's own re-check, which asks
the directory), whichever backend made the session."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from portal.accounts.directory.services import directory_user_accept, directory_user_revoke
from portal.accounts.models import Source
from portal.accounts.roles import ROLE_VIEWER
from portal.live.consumers import CLOSE_UNAUTHENTICATED
from tests.accounts import conftest as accounts_conftest
from tests.accounts.conftest import LDAP_BACKEND, ldap_configure
from tests.factories import UserFactory
from tests.live.conftest import ORIGIN
from tests.live.test_live_access_ends import closed_with

pytestmark = [pytest.mark.django_db(transaction=True)]

# A real slapd, started as the accounts tests start it.
directory = accounts_conftest.directory
ldap_on = accounts_conftest.ldap_on

DIRECTORY = {
    "LDAP_SERVER_URI": "ldap://127.0.0.1:1",
    "LDAP_USER_SEARCH_BASE": "ou=people,dc=lab,dc=example",
    "LDAP_ROLE_GROUPS": "viewer=cn=portal-viewers,ou=groups,dc=lab,dc=example",
}


@pytest.mark.parametrize("backend", [LDAP_BACKEND, "django.contrib.auth.backends.ModelBackend"])
async def test_revocation_by_the_directory_closes_the_socket(layer, fleet, settings, backend):
    from portal.asgi import application

    ldap_configure(settings, DIRECTORY)
    user = await database_sync_to_async(UserFactory)(username="vic", role=ROLE_VIEWER)
    await database_sync_to_async(directory_user_accept)(
        user=user, source=Source.LDAP, directory_id="uid=vic,ou=people,dc=lab,dc=example", role=ROLE_VIEWER
    )
    client = Client()
    await database_sync_to_async(client.force_login)(user, backend=backend)
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    communicator = WebsocketCommunicator(application, "/ws/live/fleet/", headers=[ORIGIN, (b"cookie", cookie.encode())])
    connected, _ = await communicator.connect(timeout=3)
    assert connected
    try:
        assert (await communicator.receive_json_from(timeout=2))["kind"] == "hello"
        await database_sync_to_async(directory_user_revoke)(user=user, source=Source.LDAP)
        assert await closed_with(communicator) == CLOSE_UNAUTHENTICATED
        page = await database_sync_to_async(client.get)("/account/")
        assert page.status_code == 302  # and the session's pages ask for a login again
    finally:
        await communicator.disconnect()


async def test_a_role_lost_at_the_directory_closes_the_socket_within_live_recheck_s(layer, fleet, ldap_on, settings):
    """No sign-in, no page load, no sync: the socket's own re-check asks the directory."""
    from portal.asgi import application

    settings.LIVE_RECHECK_S = 0.3
    client = Client()
    signed_in = await database_sync_to_async(client.post)("/login/", {"username": "vic", "password": "vic-pass-1"})
    assert signed_in.status_code == 302
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    communicator = WebsocketCommunicator(application, "/ws/live/fleet/", headers=[ORIGIN, (b"cookie", cookie.encode())])
    try:
        connected, _ = await communicator.connect(timeout=3)
        assert connected and (await communicator.receive_json_from(timeout=2))["kind"] == "hello"
        await database_sync_to_async(ldap_on.member_set)("viewer", [])
        assert await closed_with(communicator, timeout=5) == CLOSE_UNAUTHENTICATED
    finally:
        await communicator.disconnect()
