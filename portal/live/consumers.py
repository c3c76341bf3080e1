"""WebSocket entry points of the live pages: one GPU, one host, the whole fleet, the ticket feed.

Thin: authenticate, check the permission, join the group. Messages arrive already encoded by
the publisher (portal/live/publish.py) and go out as they are. Close codes the pages act on:
4401 not logged in (the page stops retrying and asks to log in again), 4403 no permission,
4404 no such GPU or host.

A socket stays open for days, so the check made at connect is made again: every LIVE_RECHECK_S
seconds (the session still exists and is the user's, the user is active, a directory account's
directory still gives it a role, the role still allows it), and at once when the user logs out of
that session, is saved (deactivated, new password) or changes groups (portal/live/signals.py sends
those events to the user's group).
"""

import asyncio
import json
from importlib import import_module
from types import SimpleNamespace

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib import auth

from portal.accounts.directory.recheck import directory_account_recheck
from portal.fleet import selectors as fleet_selectors
from portal.live import publish

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


def user_group(user_id: int) -> str:
    """The group of every live socket of one user (re-check and logout events)."""
    return f"live.user.{user_id}"


class LiveConsumer(AsyncJsonWebsocketConsumer):
    permission = "fleet.view_gpu"
    group = user_id = session_key = _refresh = _recheck = None

    async def connect(self):
        self.group = None
        self._refresh = None
        self._recheck = None
        self.user_id = None
        # Accept first and then close, so that the browser sees our close code (a rejected
        # handshake reaches it only as 1006) and can tell "log in again" from "network down".
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(user.has_perm)(self.permission):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        group = await self.resolve_group()
        if group is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.user_id = user.pk
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        await self.channel_layer.group_add(user_group(user.pk), self.channel_name)
        self._recheck = asyncio.create_task(self._recheck_periodically())
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await publish.watchers.watch(group)
        publish.publisher.attach(asyncio.get_running_loop())
        self._refresh = asyncio.create_task(self._keep_membership())
        coalesce_ms = round(publish.coalesce_interval(group) * 1000)
        await self.send_json({"kind": "hello", "group": group, "coalesce_ms": coalesce_ms})

    async def resolve_group(self) -> str | None:
        raise NotImplementedError

    async def _keep_membership(self):
        # channels-redis drops a group membership after group_expiry seconds; a wall screen
        # stays connected for days, so re-join well before that.
        expiry = getattr(self.channel_layer, "group_expiry", 86400)
        while True:
            await asyncio.sleep(max(5.0, min(expiry, publish.Watchers.TTL_S) / 3))
            await self.channel_layer.group_add(self.group, self.channel_name)
            await publish.watchers.refresh(self.group)

    async def _recheck_periodically(self):
        while True:
            await asyncio.sleep(settings.LIVE_RECHECK_S)
            await self.live_recheck({})

    def _access_code(self) -> int | None:
        """None while the socket's session still signs its user in with the permission; else the close code."""
        if self.session_key is None:
            return CLOSE_UNAUTHENTICATED
        store = import_module(settings.SESSION_ENGINE).SessionStore(self.session_key)
        # What every request does with its session cookie: the session exists, names a user who
        # is active and whose password (session hash) is unchanged.
        user = auth.get_user(SimpleNamespace(session=store))
        if not user.is_authenticated or user.pk != self.user_id:
            return CLOSE_UNAUTHENTICATED
        # A directory account is asked about again as its pages' requests would ask.
        if directory_account_recheck(user=user) is None:
            return CLOSE_UNAUTHENTICATED
        if not user.has_perm(self.permission):
            return CLOSE_FORBIDDEN
        return None

    async def _close_with(self, code: int) -> None:
        await self._leave()
        await self.close(code=code)

    async def live_recheck(self, event):
        code = await database_sync_to_async(self._access_code)()
        if code is not None:
            await self._close_with(code)

    async def live_logout(self, event):
        if event.get("session_key") in (None, self.session_key):
            await self._close_with(CLOSE_UNAUTHENTICATED)

    async def disconnect(self, code):
        await self._leave()

    async def _leave(self):
        """Stop receiving anything (idempotent: a close by us is followed by the disconnect)."""
        if self._recheck is not None and self._recheck is not asyncio.current_task():
            self._recheck.cancel()
        self._recheck = None
        if self.user_id is not None:
            await self.channel_layer.group_discard(user_group(self.user_id), self.channel_name)
            self.user_id = None
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None
        if self.group is not None:
            group, self.group = self.group, None
            await self.channel_layer.group_discard(group, self.channel_name)
            await publish.watchers.unwatch(group)

    async def receive_json(self, content, **kwargs):
        if isinstance(content, dict) and content.get("kind") == "ping":
            await self.send_json({"kind": "pong"})

    async def live_message(self, event):
        await self.send(text_data=event["text"])

    @classmethod
    async def decode_json(cls, text_data):
        try:
            return json.loads(text_data)
        except ValueError:
            return None


class GpuConsumer(LiveConsumer):
    permission = "fleet.view_gpu"

    async def resolve_group(self):
        uuid = self.scope["url_route"]["kwargs"]["uuid"]
        gpu_id = await database_sync_to_async(
            fleet_selectors.gpus().filter(uuid=uuid).values_list("pk", flat=True).first
        )()
        return None if gpu_id is None else publish.gpu_group(gpu_id)


class HostConsumer(LiveConsumer):
    permission = "fleet.view_host"

    async def resolve_group(self):
        hostname = self.scope["url_route"]["kwargs"]["hostname"]
        host_id = await database_sync_to_async(
            fleet_selectors.hosts().filter(hostname=hostname).values_list("pk", flat=True).first
        )()
        return None if host_id is None else publish.host_group(host_id)


class FleetConsumer(LiveConsumer):
    permission = "fleet.view_gpu"

    async def resolve_group(self):
        return publish.FLEET_GROUP


class TicketFeedConsumer(LiveConsumer):
    permission = "maintenance.view_ticket"
    following = False  # the ticket events other processes record (publish.TicketFollower)

    async def resolve_group(self):
        self.following = await publish.ticket_follower.feed_opened()
        return publish.TICKETS_GROUP

    async def _leave(self):
        await super()._leave()
        if self.following:
            self.following = False
            publish.ticket_follower.feed_closed()
