"""Live push: what the ingest path and the maintenance app hand to the browsers.

Producers (the after-commit ingest hook, `ticket_changed`) only append compact items to an
in-process buffer per group; they never wait on the channel layer. One flusher per process sends
at most one message per group every interval, carrying every item since the last one. A group
that has been quiet for a full interval is sent at once (leading edge), so a GPU page that gets
one reading a second sees it without added delay.

The interval is LIVE_COALESCE_S (0.5 s: ~2 messages a second) for GPU, host and ticket groups,
the ones that multiply with the fleet. The single fleet group has its own, LIVE_FLEET_COALESCE_S
(0.2 s): it is fed without pause by every host, so its points wait for the next flush, up to an
interval. At 2 flushes a second at least half of a steadily fed group's points would wait over
250 ms (the live latency target); at 5 a second p95 stays near 200 ms, and it is still one
message per flush whatever the fleet's size.

The flusher runs on an event loop: the server's own (attached by the first consumer that
connects, which is required for the in-memory layer, whose queues belong to that loop) or, in
a process without consumers (an ingest-only worker on Redis), a private daemon thread's loop.

Groups: `gpu.<id>`, `host.<id>`, `fleet`, `tickets`. Messages (JSON text, built once per group):

    {"kind": "points", "fields": [...POINT_FIELDS], "points": [[gpu_id, ts_ms, ...], ...]}
    {"kind": "tickets", "events": [{"ticket_id", "host_id", "gpu_id", ...payload}, ...]}
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict, defaultdict

from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import translation

from portal.live.selectors import POINT_COLUMNS, POINT_FIELDS, batch_points, open_ticket_counts
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.services.tickets import feed_change
from portal.telemetry.columns import ROW_GPU_ID, ROW_TS

log = logging.getLogger(__name__)

FLEET_GROUP = "fleet"
TICKETS_GROUP = "tickets"
MESSAGE_TYPE = "live.message"  # handled by LiveConsumer.live_message
SEND_CONCURRENCY = 16


def gpu_group(gpu_id: int) -> str:
    return f"gpu.{gpu_id}"


def host_group(host_id: int) -> str:
    return f"host.{host_id}"


def coalesce_interval(group: str) -> float:
    """Seconds between two messages to this group (see the module's docstring)."""
    if group == FLEET_GROUP:
        return float(settings.LIVE_FLEET_COALESCE_S)
    return float(settings.LIVE_COALESCE_S)


class Watchers:
    """Which groups have a consumer somewhere, so that a flush skips the hundreds of GPU and host
    groups nobody is looking at (each group_send costs channels-redis several round trips).

    In-memory layer: counted in this process. Redis: a sorted set of group -> expiry time that
    consumers refresh while connected; the publisher reads it at most every WATCHED_CACHE_S. A
    stale entry only costs a needless send; if Redis can't answer, every group is sent.
    """

    KEY = "live:watched"
    TTL_S = 180
    WATCHED_CACHE_S = 0.5

    def __init__(self):
        self._local: dict[str, int] = defaultdict(int)
        self._clients: dict[int, object] = {}
        self._cache: tuple[float, set[str] | None] = (0.0, None)

    def _redis(self):
        config = settings.CHANNEL_LAYERS.get("default", {})
        if "RedisChannelLayer" not in config.get("BACKEND", ""):
            return None
        host = config.get("CONFIG", {}).get("hosts", ["redis://127.0.0.1:6379"])[0]
        url = host if isinstance(host, str) else host.get("address")
        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None or client[0] is not loop or client[1] != url:
            import redis.asyncio

            client = self._clients[id(loop)] = (loop, url, redis.asyncio.Redis.from_url(url))
        return client[2]

    async def watch(self, group: str) -> None:
        redis_client = self._redis()
        if redis_client is None:
            self._local[group] += 1
            return
        await redis_client.zadd(self.KEY, {group: time.time() + self.TTL_S})

    async def refresh(self, group: str) -> None:
        if self._redis() is not None:
            await self.watch(group)

    async def unwatch(self, group: str) -> None:
        if self._redis() is None:
            self._local[group] -= 1
            if self._local[group] <= 0:
                del self._local[group]
        # On Redis another process may watch the same group: the entry expires by itself.

    async def watched(self) -> set[str] | None:
        redis_client = self._redis()
        if redis_client is None:
            return set(self._local)
        fetched_at, groups = self._cache
        if time.monotonic() - fetched_at < self.WATCHED_CACHE_S and groups is not None:
            return groups
        try:
            now = time.time()
            await redis_client.zremrangebyscore(self.KEY, 0, now)
            groups = {member.decode() for member in await redis_client.zrange(self.KEY, 0, -1)}
        except Exception:
            log.warning("live: could not read the watched groups; sending to all", exc_info=True)
            return None
        self._cache = (time.monotonic(), groups)
        return groups

    def surely_unwatched(self, groups: set[str]) -> bool:
        """True only when none of these groups is watched, as far as a fresh answer says (sync:
        for the ingest hook). Unknown or stale (over WATCHED_CACHE_S): False, so the batch takes
        the normal path and its flush refreshes the answer."""
        if "RedisChannelLayer" not in settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", ""):
            return not groups & set(self._local)
        fetched_at, cached = self._cache
        if cached is None or time.monotonic() - fetched_at >= self.WATCHED_CACHE_S:
            return False
        return not groups & cached

    def reset(self) -> None:
        self._local.clear()
        self._clients.clear()
        self._cache = (0.0, None)


watchers = Watchers()


class Publisher:
    """Coalescing buffer per group and the single flusher that empties it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._points: dict[str, list] = defaultdict(list)
        self._tickets: dict[str, list] = defaultdict(list)
        self._last_sent: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._wakeup: asyncio.Event | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self.sent_messages = 0  # for tests and the bench

    # --- producers (any thread) ---------------------------------------------------------

    def add_points(self, groups_points: dict[str, list]) -> None:
        with self._lock:
            for group, points in groups_points.items():
                self._points[group].extend(points)
        self._kick()

    def add_ticket_event(self, event: dict) -> None:
        with self._lock:
            self._tickets[TICKETS_GROUP].append(event)
        self._kick()

    # --- the flusher's loop -------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the flusher on this (running) loop; consumers call it on connect."""
        if self._loop is not loop:
            self._loop = loop
        self._ensure_task()

    def _attached_loop(self) -> asyncio.AbstractEventLoop | None:
        loop = self._loop
        return loop if loop is not None and loop.is_running() and not loop.is_closed() else None

    def has_listeners(self) -> bool:
        """False when nobody can be listening: the in-memory layer (one process) and no consumer
        has connected in this process. The hook then skips even its query."""
        if self._attached_loop() is not None:
            return True
        return not isinstance(get_channel_layer(), InMemoryChannelLayer)

    def _target_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._attached_loop()
        if loop is not None:
            return loop
        if self._thread_loop is None or self._thread_loop.is_closed():
            with self._lock:
                if self._thread_loop is None or self._thread_loop.is_closed():
                    self._thread_loop = asyncio.new_event_loop()
                    threading.Thread(target=self._thread_loop.run_forever, name="live-publisher", daemon=True).start()
        return self._thread_loop

    def _kick(self) -> None:
        loop = self._target_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._ensure_task()
        else:
            loop.call_soon_threadsafe(self._ensure_task)

    def _ensure_task(self) -> None:
        """On the target loop: start the flusher task if this loop has none, and wake it."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wakeup = asyncio.Event()
            self._task = loop.create_task(self._run(self._wakeup))
        self._wakeup.set()

    async def _run(self, wakeup: asyncio.Event) -> None:
        while True:
            await wakeup.wait()
            wakeup.clear()
            while True:
                next_due = await self._flush_due()
                if next_due is None:
                    break
                # Sleep until the next group is due, but wake for new points: a quiet group
                # (one GPU's page) must not wait behind a busy one (the fleet's) that is not due.
                try:
                    await asyncio.wait_for(wakeup.wait(), max(0.0, next_due - time.monotonic()))
                    wakeup.clear()
                except TimeoutError:
                    pass

    def _take_due(self, now: float) -> tuple[dict[str, list], dict[str, list], float | None]:
        points, tickets, next_due = {}, {}, None
        with self._lock:
            for pending, taken in ((self._points, points), (self._tickets, tickets)):
                for group in [g for g, items in pending.items() if items]:
                    due = self._last_sent.get(group, 0.0) + coalesce_interval(group)
                    if due <= now:
                        taken[group] = pending.pop(group)
                        self._last_sent[group] = now
                    else:
                        next_due = due if next_due is None else min(next_due, due)
        return points, tickets, next_due

    async def _flush_due(self) -> float | None:
        points, tickets, next_due = self._take_due(time.monotonic())
        messages = [(g, {"kind": "points", "fields": POINT_FIELDS, "points": p}) for g, p in points.items()]
        messages += [(g, {"kind": "tickets", "events": e}) for g, e in tickets.items()]
        if messages:
            watched = await watchers.watched()
            if watched is not None:
                messages = [(group, message) for group, message in messages if group in watched]
        if messages:
            layer = get_channel_layer()
            # A few sends in flight at once: enough to hide Redis round trips, well under the
            # connection pool's size (a flush can hold hundreds of groups).
            limit = asyncio.Semaphore(SEND_CONCURRENCY)

            async def send(group, message):
                async with limit:
                    await self._send(layer, group, message)

            await asyncio.gather(*(send(group, message) for group, message in messages))
        return next_due

    async def _send(self, layer, group: str, message: dict) -> None:
        text = json.dumps(message, separators=(",", ":"), cls=DjangoJSONEncoder)
        try:
            await layer.group_send(group, {"type": MESSAGE_TYPE, "text": text})
            self.sent_messages += 1
        except ChannelFull:
            log.info("live group %s is full; message dropped", group)
        except Exception:
            # Redis away: the readings are stored; the pages back-fill from the API on reconnect.
            log.exception("live message to group %s failed", group)

    def reset(self) -> None:
        """Forget buffered items and timing (tests)."""
        with self._lock:
            self._points.clear()
            self._tickets.clear()
            self._last_sent.clear()
        self.sent_messages = 0
        watchers.reset()
        ticket_follower.reset()


publisher = Publisher()


def _points_from_rows(rows) -> list[list]:
    """Compact points from the rows ingest just stored (no query), oldest first."""
    positions = POINT_COLUMNS.from_row
    return [
        [row[ROW_GPU_ID], round(row[ROW_TS].timestamp() * 1000), *(row[position] for position in positions)]
        for row in sorted(rows, key=lambda row: row[ROW_TS])
    ]


def readings_published(*, batch_pk: int, host_id: int, gpu_ids: list[int], readings=None) -> None:
    """The after-commit ingest hook: the batch's readings into the buffer. Ingest hands over the
    rows it stored; without them (a replay), one query reads them back."""
    if not settings.LIVE_ENABLED or not gpu_ids or not publisher.has_listeners():
        return
    # Nobody looking at this host, its GPUs or the fleet: no points to build (at night, most batches).
    if watchers.surely_unwatched({FLEET_GROUP, host_group(host_id), *(gpu_group(g) for g in gpu_ids)}):
        return
    points = _points_from_rows(readings) if readings else batch_points(batch_pk=batch_pk, gpu_ids=gpu_ids)
    groups: dict[str, list] = defaultdict(list)
    for point in points:
        groups[gpu_group(point[0])].append(point)
    fleet = [point for points in groups.values() for point in points]
    if not fleet:
        return
    groups[host_group(host_id)] = fleet
    groups[FLEET_GROUP] = fleet
    publisher.add_points(groups)


def ticket_changed(ticket_id: int, host_id: int, gpu_id: int | None, payload: dict) -> None:
    """Push one ticket change to the ticket feed (`tickets` group) once the caller's transaction commits.

    `ticket_event_published` (subscribed to portal.maintenance.hooks) calls it for every ticket
    change people watch for. Outside a transaction it is queued at once. It never raises for a delivery problem
    and never blocks on the channel layer. `payload` must be JSON-serialisable (datetimes are
    fine). The feed reads these keys, all optional but the first:

        event        "opened" | "acknowledged" | "resolved"
        severity     "critical" | "warning" | "info"
        title        one line, e.g. "Temperature near slowdown (88 °C)", in English
        titles       {language code: title} for every language of LANGUAGES; each page shows
                     its own (the feed's one message goes to readers of every language)
        url          the ticket's page
        at           when it happened (datetime or RFC 3339 string; default: when received)
        by           who acknowledged / resolved it
        hostname, gpu_label   for the feed's subject line
        open_counts  {"critical": n, "warning": n, "info": n}: open tickets after this change,
                     so the fleet page's tile stays right without a reload
    """
    event = {**payload, "ticket_id": ticket_id, "host_id": host_id, "gpu_id": gpu_id}
    transaction.on_commit(lambda: _queue_ticket_event(event))


def ticket_event_published(*, ticket, event, change: str) -> None:
    """The maintenance ticket hook: one feed item per change people watch for."""
    if not (settings.LIVE_ENABLED and publisher.has_listeners()):
        return  # nobody to tell: not even the counts' query
    ticket_follower.published(event.pk)
    _feed_item_queue(ticket=ticket, event=event, change=change, open_counts=open_ticket_counts())


def _feed_item_queue(*, ticket, event, change: str, open_counts: dict) -> None:
    ticket_changed(
        ticket.pk,
        ticket.host_id,
        ticket.gpu_id,
        {
            "event": change,
            "severity": ticket.severity,
            "title": ticket.title,
            "titles": titles_in_every_language(ticket),
            "url": ticket.get_absolute_url(),
            "at": event.at,
            "by": event.user.get_username() if event.user_id else "",
            "hostname": ticket.host.hostname,
            "gpu_label": f"GPU {ticket.gpu.index}" if ticket.gpu_id else "",
            "open_counts": open_counts,
        },
    )


class TicketFollower:
    """The ticket feed's items for the ticket events another process recorded, on the in-memory layer.

    Without Redis (the embedded default) tickets are opened and resolved by the worker, another
    process: its hook has nobody to tell there, and this process's feeds would never hear of them.
    While a ticket feed is open in this process, the follower reads the events recorded since its
    last look every FOLLOW_EVERY_S and queues them as the hook would; the ones the hook queued in
    this process are known by id and skipped. With Redis every process sends its own."""

    FOLLOW_EVERY_S = 1.0
    REMEMBERED = 1000  # ids of events queued here: far more than a second's worth

    def __init__(self):
        self._lock = threading.Lock()
        self._queued_here: OrderedDict[int, None] = OrderedDict()
        self._feeds = 0
        self._task: asyncio.Task | None = None

    def published(self, event_pk: int) -> None:
        with self._lock:
            self._queued_here[event_pk] = None
            while len(self._queued_here) > self.REMEMBERED:
                self._queued_here.popitem(last=False)

    def _queued_before(self, event_pk: int) -> bool:
        with self._lock:
            return event_pk in self._queued_here

    async def feed_opened(self) -> bool:
        """A ticket feed connected (on the running loop): follow while any is open. False when
        there is nothing to follow (a shared layer: every process sends its own).

        The first feed's cursor is read before this returns, so before the feed says hello: an
        event another process records once the feed is open is after the cursor, never under it."""
        if not isinstance(get_channel_layer(), InMemoryChannelLayer):
            return False
        self._feeds += 1
        if not self._following_on_this_loop():
            cursor = await database_sync_to_async(maintenance_selectors.ticket_event_last_pk)()
            if not self._following_on_this_loop():  # another feed may have started it meanwhile
                self._task = asyncio.get_running_loop().create_task(self._follow(cursor))
        return True

    def _following_on_this_loop(self) -> bool:
        return self._task is not None and not self._task.done() and self._task.get_loop() is asyncio.get_running_loop()

    def feed_closed(self) -> None:
        self._feeds = max(0, self._feeds - 1)

    async def _follow(self, cursor: int) -> None:
        while self._feeds > 0:
            await asyncio.sleep(self.FOLLOW_EVERY_S)
            try:
                cursor = await database_sync_to_async(self.feed_after)(cursor)
            except Exception:
                log.exception("live: could not read the ticket events after #%s", cursor)

    def feed_after(self, cursor: int) -> int:
        """Queue the feed items of the events after `cursor` not queued here; the last event's id.
        The open tickets are counted once: as they stand now, after every event read."""
        open_counts = None
        for event in maintenance_selectors.ticket_events_after(pk=cursor):
            cursor = event.pk
            change = feed_change(event)
            if change and not self._queued_before(event.pk):
                open_counts = open_ticket_counts() if open_counts is None else open_counts
                _feed_item_queue(ticket=event.ticket, event=event, change=change, open_counts=open_counts)
        return cursor

    def reset(self) -> None:
        """Forget what was queued and the feeds (tests)."""
        with self._lock:
            self._queued_here.clear()
        self._feeds = 0
        self._task = None


ticket_follower = TicketFollower()


def titles_in_every_language(ticket) -> dict[str, str]:
    titles = {}
    for code, _name in settings.LANGUAGES:
        with translation.override(code):
            titles[code] = ticket.title_shown
    return titles


def _queue_ticket_event(event: dict) -> None:
    if settings.LIVE_ENABLED and publisher.has_listeners():
        publisher.add_ticket_event(event)
