"""An open live socket stops when its user's access ends: logout, deactivation, role taken away,
or a session gone without any signal (found by the periodic re-check)."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import Group
from django.contrib.sessions.models import Session
from django.test import Client

from portal.accounts.roles import ROLE_VIEWER
from portal.live.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from tests.factories import UserFactory
from tests.live.conftest import ORIGIN

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def viewer_user(transactional_db):
    return UserFactory(username="charlie", role=ROLE_VIEWER)


async def _open(user, path="/ws/live/fleet/"):
    """A socket logged in through a real session; returns it with the session's client."""
    from portal.asgi import application

    client = Client()
    await database_sync_to_async(client.force_login)(user)
    cookie = f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    communicator = WebsocketCommunicator(application, path, headers=[ORIGIN, (b"cookie", cookie.encode())])
    connected, _ = await communicator.connect(timeout=3)
    assert connected
    assert (await communicator.receive_json_from(timeout=2))["kind"] == "hello"
    return communicator, client


async def closed_with(communicator, timeout=3.0) -> int | None:
    while True:
        message = await communicator.receive_output(timeout=timeout)
        if message["type"] == "websocket.close":
            return message.get("code")


async def test_logout_closes_that_sessions_sockets_only(layer, fleet, viewer_user):
    first, first_client = await _open(viewer_user)
    second, _ = await _open(viewer_user)
    try:
        await database_sync_to_async(first_client.logout)()
        assert await closed_with(first) == CLOSE_UNAUTHENTICATED
        assert await second.receive_nothing(timeout=0.3)  # the other browser stays logged in
    finally:
        await first.disconnect()
        await second.disconnect()


async def test_deactivation_closes_the_socket(layer, fleet, viewer_user):
    communicator, _ = await _open(viewer_user)
    try:
        viewer_user.is_active = False
        await database_sync_to_async(viewer_user.save)()
        assert await closed_with(communicator) == CLOSE_UNAUTHENTICATED
    finally:
        await communicator.disconnect()


async def test_losing_the_role_closes_the_socket(layer, fleet, viewer_user):
    communicator, _ = await _open(viewer_user)
    try:
        role = await database_sync_to_async(Group.objects.get)(name=ROLE_VIEWER)
        await database_sync_to_async(viewer_user.groups.remove)(role)
        assert await closed_with(communicator) == CLOSE_FORBIDDEN
    finally:
        await communicator.disconnect()


async def test_the_timer_finds_a_session_gone_without_a_signal(layer, fleet, viewer_user, settings):
    settings.LIVE_RECHECK_S = 0.2
    communicator, _ = await _open(viewer_user)
    try:
        await database_sync_to_async(lambda: Session.objects.all().delete())()
        assert await closed_with(communicator, timeout=3) == CLOSE_UNAUTHENTICATED
    finally:
        await communicator.disconnect()


async def test_a_socket_whose_access_holds_keeps_streaming(layer, fleet, viewer_user, settings):
    settings.LIVE_RECHECK_S = 0.1
    communicator, _ = await _open(viewer_user)
    try:
        assert await communicator.receive_nothing(timeout=0.6)
    finally:
        await communicator.disconnect()
