"""The live WebSocket endpoints: who may connect, what arrives after an ingest, and the coalescing
that keeps a busy group to ~2 messages a second (the fleet group: ~5). Each test runs on the
in-memory layer and again on channels-redis (Redis db 15)."""

import asyncio
import contextlib
import time

import pytest

from portal.accounts.roles import ROLE_VIEWER
from portal.live import publish, selectors
from portal.live.consumers import CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from tests.factories import GpuFactory, HostFactory, UserFactory
from tests.telemetry.batches import gpu_uuid

pytestmark = [pytest.mark.django_db(transaction=True)]

FIELDS = list(selectors.POINT_FIELDS)


@pytest.fixture
def viewer_user(transactional_db):
    return UserFactory(username="charlie", role=ROLE_VIEWER)


async def receive_points(communicator, timeout=2.0) -> dict:
    """The next 'points' message (skipping the hello)."""
    deadline = time.monotonic() + timeout
    while True:
        message = await communicator.receive_json_from(timeout=max(0.05, deadline - time.monotonic()))
        if message["kind"] == "points":
            return message


async def drain(communicator, seconds: float) -> list[tuple[float, dict]]:
    """Every message that arrives within `seconds`, with its arrival time."""
    received = []
    deadline = time.monotonic() + seconds
    # receive_nothing() polls without cancelling the consumer (a timed-out receive_json_from would).
    while (left := deadline - time.monotonic()) > 0:
        if await communicator.receive_nothing(timeout=min(0.02, left)):
            continue
        received.append((time.monotonic(), await communicator.receive_json_from(timeout=1)))
    return received


async def test_anonymous_is_closed_with_4401(layer, fleet, connect):
    communicator, connected, _ = await connect("/ws/live/fleet/")
    try:
        assert connected  # accepted first, so that the browser sees the code
        closed = await communicator.receive_output(timeout=2)
        assert closed == {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}
    finally:
        await communicator.disconnect()


async def test_foreign_origin_is_refused(layer, fleet, viewer_user, connect):
    communicator, connected, _ = await connect("/ws/live/fleet/", viewer_user, origin=(b"origin", b"https://evil.test"))
    try:
        assert not connected
    finally:
        await communicator.disconnect()


async def test_user_without_role_gets_4403_and_unknown_gpu_4404(layer, fleet, connect):
    outsider = await asyncio.to_thread(lambda: UserFactory(username="mallory"))
    communicator, connected, _ = await connect("/ws/live/fleet/", outsider)
    try:
        assert connected
        assert (await communicator.receive_output(timeout=2))["code"] == CLOSE_FORBIDDEN
    finally:
        await communicator.disconnect()
    viewer = await asyncio.to_thread(lambda: UserFactory(username="charlie", role=ROLE_VIEWER))
    communicator, connected, _ = await connect("/ws/live/gpu/GPU-nope/", viewer)
    try:
        assert (await communicator.receive_output(timeout=2))["code"] == CLOSE_NOT_FOUND
    finally:
        await communicator.disconnect()


async def test_viewer_receives_the_points_of_an_ingest(layer, fleet, viewer_user, connect, ingest):
    host, gpus = fleet
    pages = {
        "gpu": await connect(f"/ws/live/gpu/{gpus[1].uuid}/", viewer_user),
        "host": await connect(f"/ws/live/host/{host.hostname}/", viewer_user),
        "fleet": await connect("/ws/live/fleet/", viewer_user),
    }
    try:
        for communicator, connected, _ in pages.values():
            assert connected
            hello = await communicator.receive_json_from(timeout=2)
            assert hello["kind"] == "hello"
        result = await ingest(host, gpus, rounds=3, temperature=71)
        assert result.accepted == 6

        gpu_message = await receive_points(pages["gpu"][0])
        assert gpu_message["fields"] == FIELDS
        assert {point[0] for point in gpu_message["points"]} == {gpus[1].pk}  # only that GPU
        assert len(gpu_message["points"]) == 3
        point = dict(zip(FIELDS, gpu_message["points"][-1], strict=True))
        assert point["temperature_c"] == 71
        assert point["power_w"] == 412.5
        assert point["throttle_reasons"] == 1 << 5  # sw_thermal, as the stored bitmask
        timestamps = [p[1] for p in gpu_message["points"]]
        assert timestamps == sorted(timestamps)

        for name in ("host", "fleet"):
            message = await receive_points(pages[name][0])
            assert len(message["points"]) == 6, name
    finally:
        for communicator, _, _ in pages.values():
            await communicator.disconnect()


async def _coalesced(connect, user, path, host, gpus, ingest) -> tuple[list[tuple[float, dict]], dict]:
    """Ten batches (two readings each) within ~1 s; the points messages that arrive, and the hello."""
    communicator, connected, _ = await connect(path, user)
    try:
        assert connected
        hello = await communicator.receive_json_from(timeout=2)

        async def feed():
            began = time.monotonic()
            for _ in range(10):
                await ingest(host, gpus, rounds=1)
                await asyncio.sleep(0.1)
            return time.monotonic() - began

        began = time.monotonic()
        producer = asyncio.create_task(feed())
        received = await drain(communicator, 2.2)
        # A loaded machine stretches the feed past the 2.2 s: its last batch's points still come,
        # one window (0.5 s at most) after that batch, so the drain lasts until then and a margin.
        while not producer.done():
            received += await drain(communicator, 0.1)
        _coalesced.feed_s = await producer
        if (left := began + _coalesced.feed_s + 1.1 - time.monotonic()) > 0:
            received += await drain(communicator, left)
    finally:
        await communicator.disconnect()
    return [(at, m) for at, m in received if m["kind"] == "points"], hello


def _gaps(messages) -> list[float]:
    return [later - earlier for (earlier, _), (later, _) in zip(messages, messages[1:], strict=False)]


def _mean_gap(messages) -> float:
    """The time between messages as received, on average: one message received late and the next
    on time (a busy event loop here, not the flushes there) shorten one gap but not the mean."""
    return (messages[-1][0] - messages[0][0]) / (len(messages) - 1)


@pytest.mark.serial
async def test_busy_gpu_group_is_coalesced_to_two_messages_a_second(layer, fleet, viewer_user, connect, ingest):
    host, gpus = fleet
    messages, hello = await _coalesced(connect, viewer_user, f"/ws/live/gpu/{gpus[0].uuid}/", host, gpus, ingest)
    assert hello["coalesce_ms"] == 500
    assert sum(len(m["points"]) for _, m in messages) == 10  # every point of this GPU arrives
    assert 2 <= len(messages) < 10  # not one per batch; the gaps bound the rate
    assert _mean_gap(messages) >= 0.42, _gaps(messages)  # 0.5 s apart, less the polling granularity


@pytest.mark.serial
async def test_fleet_group_is_coalesced_to_its_own_shorter_window(layer, fleet, viewer_user, connect, ingest):
    """Fed by every host without pause, the fleet group is flushed every 0.2 s (see publish.py)."""
    host, gpus = fleet
    messages, hello = await _coalesced(connect, viewer_user, "/ws/live/fleet/", host, gpus, ingest)
    assert hello["coalesce_ms"] == 200
    assert sum(len(m["points"]) for _, m in messages) == 20  # every point arrives
    # Fewer messages than the ten batches; the gaps bound the rate. A loaded machine stretches the
    # feed: once its batches come a window or more apart, each may have its own flush.
    batches_per_window = 10 * 0.2 / _coalesced.feed_s
    assert 3 <= len(messages) < 10 or (len(messages) == 10 and batches_per_window <= 1.25), _coalesced.feed_s
    assert _mean_gap(messages) >= 0.16, _gaps(messages)  # 0.2 s less the polling granularity under load


@pytest.mark.serial
async def test_fleet_window_follows_its_setting(layer, fleet, viewer_user, connect, ingest, settings):
    settings.LIVE_FLEET_COALESCE_S = 0.5
    host, gpus = fleet
    messages, hello = await _coalesced(connect, viewer_user, "/ws/live/fleet/", host, gpus, ingest)
    assert hello["coalesce_ms"] == 500
    assert sum(len(m["points"]) for _, m in messages) == 20
    assert 2 <= len(messages) < 10  # the gaps bound the rate
    assert _mean_gap(messages) >= 0.42, _gaps(messages)


async def test_ticket_changes_reach_the_feed(layer, fleet, viewer_user, connect):
    host, gpus = fleet
    communicator, connected, _ = await connect("/ws/live/tickets/", viewer_user)
    try:
        assert connected
        await communicator.receive_json_from(timeout=2)  # hello
        await asyncio.to_thread(
            publish.ticket_changed,
            41,
            host.pk,
            gpus[0].pk,
            {"event": "opened", "severity": "critical", "title": "Hot", "open_counts": {"critical": 1}},
        )
        message = await communicator.receive_json_from(timeout=2)
    finally:
        await communicator.disconnect()
    assert message["kind"] == "tickets"
    assert message["events"] == [
        {
            "event": "opened",
            "severity": "critical",
            "title": "Hot",
            "open_counts": {"critical": 1},
            "ticket_id": 41,
            "host_id": host.pk,
            "gpu_id": gpus[0].pk,
        }
    ]


async def test_a_ticket_opened_and_acknowledged_by_the_engine_reaches_the_feed(layer, fleet, viewer_user, connect):
    from django.utils import timezone

    from portal.maintenance.services.tickets import ticket_fire, ticket_transition

    host, gpus = fleet
    communicator, connected, _ = await connect("/ws/live/tickets/", viewer_user)
    try:
        assert connected
        await communicator.receive_json_from(timeout=2)  # hello
        ticket, what = await asyncio.to_thread(
            lambda: ticket_fire(rule="overheat", host_id=host.pk, gpu_id=gpus[0].pk, at=timezone.now(), value=91.0)
        )
        opened = await communicator.receive_json_from(timeout=2)
        await asyncio.to_thread(lambda: ticket_transition(ticket=ticket, to_state="acknowledged", user=viewer_user))
        acknowledged = await communicator.receive_json_from(timeout=2)
    finally:
        await communicator.disconnect()
    assert what == "opened"
    [event] = opened["events"]
    assert (event["event"], event["ticket_id"], event["gpu_id"]) == ("opened", ticket.pk, gpus[0].pk)
    assert event["url"] == ticket.get_absolute_url()
    assert event["open_counts"][ticket.severity] == 1
    # One message goes to readers of every language: each page picks its title (static/live/tickets.js).
    assert event["title"] == ticket.title and event["titles"]["en"] == ticket.title
    assert event["titles"]["zh-hans"].startswith("GPU 过热"), event["titles"]
    [event] = acknowledged["events"]
    assert (event["event"], event["by"]) == ("acknowledged", "charlie")


async def test_an_escalation_reaches_the_feed_with_the_counts_after_it(layer, fleet, viewer_user, connect):
    """The fleet's "open tickets" tile follows the feed's open_counts: after a warning ticket
    escalates to critical, they must count it as critical."""
    from django.utils import timezone

    from portal.maintenance.services.tickets import ticket_fire, ticket_update

    host, gpus = fleet
    communicator, connected, _ = await connect("/ws/live/tickets/", viewer_user)
    try:
        assert connected
        await communicator.receive_json_from(timeout=2)  # hello
        ticket, _ = await asyncio.to_thread(
            lambda: ticket_fire(
                rule="overheat", host_id=host.pk, gpu_id=gpus[0].pk, at=timezone.now(), value=88.0, severity="warning"
            )
        )
        opened = await communicator.receive_json_from(timeout=2)
        _, what = await asyncio.to_thread(
            lambda: ticket_update(
                rule="overheat", host_id=host.pk, gpu_id=gpus[0].pk, at=timezone.now(), value=93.0, severity="critical"
            )
        )
        escalated = await communicator.receive_json_from(timeout=2)
    finally:
        await communicator.disconnect()
    assert what == "escalated"
    assert opened["events"][0]["open_counts"] == {"critical": 0, "warning": 1, "info": 0}
    [event] = escalated["events"]
    assert (event["event"], event["severity"]) == ("escalated", "critical")
    assert event["open_counts"] == {"critical": 1, "warning": 0, "info": 0}


@pytest.mark.serial
async def test_a_quiet_gpu_group_is_not_held_behind_the_busy_fleet_group(layer, fleet, viewer_user, connect, ingest):
    host, gpus = fleet
    communicator, connected, _ = await connect(f"/ws/live/gpu/{gpus[0].uuid}/", viewer_user)
    try:
        assert connected
        await communicator.receive_json_from(timeout=2)  # hello
        # Points for the fleet group only (another host's GPU is not on this page): the first
        # goes out, the second waits for the fleet's window.
        other_host = await asyncio.to_thread(lambda: HostFactory(hostname="dgx-08"))
        other_gpus = await asyncio.to_thread(
            lambda: [GpuFactory(host=other_host, uuid=gpu_uuid(10 + n), index=n) for n in range(2)]
        )
        await ingest(other_host, other_gpus)
        await asyncio.sleep(0.05)
        await ingest(other_host, other_gpus)
        started = time.monotonic()
        await ingest(host, gpus[:1])  # now this page's GPU: due at once
        message = await receive_points(communicator, timeout=2)
        waited = time.monotonic() - started
    finally:
        await communicator.disconnect()
    assert [point[0] for point in message["points"]] == [gpus[0].pk]
    assert waited < 0.3, f"the GPU page's point waited {waited:.2f} s behind the fleet group"


async def test_a_batch_nobody_watches_builds_no_points(fleet, viewer_user, connect, ingest, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    host, gpus = fleet
    other_host = await asyncio.to_thread(lambda: HostFactory(hostname="dgx-08"))
    other_gpus = await asyncio.to_thread(lambda: [GpuFactory(host=other_host, uuid=gpu_uuid(20), index=0)])
    communicator, connected, _ = await connect(f"/ws/live/gpu/{gpus[0].uuid}/", viewer_user)
    try:
        assert connected
        await communicator.receive_json_from(timeout=2)  # hello
        await ingest(other_host, other_gpus)  # nobody looks at dgx-08, its GPU, or the fleet
        other_group = publish.host_group(other_host.pk)
        # Neither buffered nor already flushed: the points were never built.
        assert not publish.publisher._points.get(other_group)
        assert other_group not in publish.publisher._last_sent
        await ingest(host, gpus[:1])  # this page's GPU: built and sent
        message = await receive_points(communicator, timeout=2)
    finally:
        await communicator.disconnect()
    assert [point[0] for point in message["points"]] == [gpus[0].pk]


@pytest.fixture
def another_process(monkeypatch):
    """Within the block, tickets change as in a process where nobody listens (the embedded
    worker beside a web server on the in-memory layer): the hook queues nothing."""

    @contextlib.contextmanager
    def block():
        with monkeypatch.context() as patch:
            patch.setattr(publish.publisher, "has_listeners", lambda: False)
            yield

    return block


@contextlib.asynccontextmanager
async def feed_with_a_ticket_opened_elsewhere(connect, user, another_process, gpu):
    """A ticket feed on the in-memory layer, past its hello, and an overheat ticket of `gpu` opened
    as by another process: yields (communicator, ticket, the feed's message of it)."""
    from django.utils import timezone

    from portal.maintenance.services.tickets import ticket_fire

    communicator, connected, _ = await connect("/ws/live/tickets/", user)
    try:
        assert connected
        await communicator.receive_json_from(timeout=3)  # hello
        with another_process():
            ticket, _what = await asyncio.to_thread(
                lambda: ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=91.0)
            )
        opened = await communicator.receive_json_from(timeout=5)
        yield communicator, ticket, opened
    finally:
        await communicator.disconnect()


async def test_tickets_another_process_changes_reach_the_feed_once(
    fleet, viewer_user, connect, another_process, settings
):
    """The in-memory layer: the worker that opens and resolves tickets is another process."""
    from portal.maintenance.services.tickets import ticket_transition

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    _host, gpus = fleet
    async with feed_with_a_ticket_opened_elsewhere(connect, viewer_user, another_process, gpus[0]) as (
        communicator, ticket, opened,
    ):  # fmt: skip
        # Changed in this process: queued by the hook, and not a second time by the follower.
        await asyncio.to_thread(lambda: ticket_transition(ticket=ticket, to_state="acknowledged", user=viewer_user))
        acknowledged = await communicator.receive_json_from(timeout=5)
        assert await communicator.receive_nothing(timeout=2.5)
    [event] = opened["events"]
    assert (event["event"], event["ticket_id"], event["gpu_id"]) == ("opened", ticket.pk, gpus[0].pk)
    assert event["titles"]["zh-hans"].startswith("GPU 过热") and sum(event["open_counts"].values()) == 1
    assert [(e["event"], e["by"]) for e in acknowledged["events"]] == [("acknowledged", "charlie")]


async def test_a_ticket_another_process_opens_just_after_hello_reaches_the_feed(
    fleet, viewer_user, connect, another_process, settings, monkeypatch
):
    """The follower's first look at the events may be slow (a busy database): the feed says hello
    only after it, so a ticket opened elsewhere right after the hello is never taken for old."""
    from portal.maintenance import selectors as maintenance_selectors

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    last_event_pk = maintenance_selectors.ticket_event_last_pk

    def slow_last_event_pk():
        time.sleep(1.0)
        return last_event_pk()

    monkeypatch.setattr(maintenance_selectors, "ticket_event_last_pk", slow_last_event_pk)
    _host, gpus = fleet
    async with feed_with_a_ticket_opened_elsewhere(connect, viewer_user, another_process, gpus[0]) as (
        _communicator, ticket, opened,
    ):  # fmt: skip
        pass
    assert [(e["event"], e["ticket_id"]) for e in opened["events"]] == [("opened", ticket.pk)]
