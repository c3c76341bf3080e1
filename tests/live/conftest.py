"""Fixtures for the live push: the channel layer under test (in-memory, or Redis db 15), a host
with GPUs, a way to ingest a batch for real (committed, so the after-commit hook runs), and
WebSocket communicators that go through the whole ASGI stack (origin check, session, router)."""

import datetime as dt
import json
import uuid as uuidlib

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from portal.live.publish import publisher
from portal.telemetry.models import READING_METRICS
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services.ingest import reading_batch_ingest
from tests.factories import GpuFactory, HostFactory

ORIGIN = (b"origin", b"http://localhost")


def gpu_uuid(n: int) -> str:
    return f"GPU-{n:08x}-1111-4222-8333-444455556666"


@pytest.fixture(autouse=True)
def _fresh_publisher():
    publisher.reset()
    yield
    publisher.reset()


@pytest.fixture(params=["memory", "redis"])
def layer(request, settings):
    """Run the test on the in-memory layer and again on channels-redis (db 15, flushed)."""
    if request.param == "redis":
        import redis

        url = request.getfixturevalue("redis_url")
        redis.Redis.from_url(url).flushdb()
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [url], "capacity": 200, "expiry": 30, "group_expiry": 3600},
            }
        }
    else:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield request.param
    channel_layers.backends.clear()


@pytest.fixture
def fleet(transactional_db):
    """Host dgx-07 with two GPUs (slowdown 90 °C, shutdown 95 °C)."""
    host = HostFactory(hostname="dgx-07")
    gpus = [GpuFactory(host=host, uuid=gpu_uuid(n), index=n, temp_slowdown_c=90, temp_shutdown_c=95) for n in range(2)]
    return host, gpus


def batch_for(host, gpus, *, rounds: int = 1, end: dt.datetime | None = None, temperature: int = 64) -> BatchIn:
    """An ingest-v1 batch: `rounds` readings per GPU one second apart, the last at `end`."""
    end = end or timezone.now()
    readings = []
    for round_ in range(rounds):
        ts = end - dt.timedelta(seconds=rounds - 1 - round_)
        for gpu in gpus:
            readings.append(
                {
                    **dict.fromkeys(READING_METRICS),
                    "gpu_uuid": gpu.uuid,
                    "ts": ts.isoformat(),
                    "temperature_c": temperature,
                    "power_w": 412.5,
                    "power_limit_w": 700.0,
                    "utilization_gpu_pct": 97,
                    "fan_speed_pct": 55,
                    "sm_clock_mhz": 1980,
                    "mem_clock_mhz": 3201,
                    "memory_used_mib": 80211,
                    "throttle_reasons": ["sw_thermal"],
                }
            )
    return BatchIn.model_validate_json(
        json.dumps(
            {
                "batch_id": str(uuidlib.uuid4()),
                "sent_at": end.isoformat(),
                "host": {"hostname": host.hostname, "agent_version": "0.1.0", "driver_version": "580.65.06"},
                "gpus": [],
                "readings": readings,
            }
        )
    )


@pytest.fixture
def ingest():
    """await ingest(host, gpus, rounds=..., temperature=...): store a batch and commit it."""

    async def run(host, gpus, **kwargs):
        batch = batch_for(host, gpus, **kwargs)
        return await database_sync_to_async(reading_batch_ingest)(host=host, batch=batch)

    return run


@pytest.fixture
def connect():
    """await connect(path, user=None, origin=ORIGIN): a communicator through portal.asgi.application,
    logged in with a real session cookie when a user is given. Returns (communicator, connected, code)."""
    from portal.asgi import application

    opened = []

    async def run(path, user=None, origin=ORIGIN):
        headers = [origin] if origin else []
        if user is not None:
            client = Client()
            await database_sync_to_async(client.force_login)(user)
            cookie = (
                f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
            )
            headers.append((b"cookie", cookie.encode()))
        communicator = WebsocketCommunicator(application, path, headers=headers)
        opened.append(communicator)
        connected, code = await communicator.connect(timeout=3)
        return communicator, connected, code

    yield run
