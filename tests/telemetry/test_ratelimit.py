"""The per-host-token rate limit of ingest: in this process without Redis; with REDIS_URL one
bucket per token in Redis, shared by every portal process; while Redis does not answer, each
process limits on its own again (ingest is never refused because the limiter's store is down)."""

import logging
import math
import shutil
import subprocess
import time
import uuid

import pytest
import redis

from portal.ops.supervise import free_port
from portal.telemetry import ingest_view
from portal.telemetry.ratelimit import RedisTokenBucketLimiter, TokenBucketLimiter, rate_limiter
from tests.conftest import skip_or_fail
from tests.telemetry.batches import gpu_uuid, make_batch


class StoppedClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def namespace(redis_url):
    """A key prefix of this test's own, removed afterwards (token pks repeat across tests)."""
    prefix = f"test-rate:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


def test_without_redis_the_limit_is_kept_in_this_process():
    limiter = rate_limiter(rate_per_s=1.0, burst=2, redis_url="", namespace="ingest:")
    assert isinstance(limiter, TokenBucketLimiter)


@pytest.mark.redis
def test_two_limiters_on_one_redis_take_from_one_bucket(redis_url, namespace):
    first = RedisTokenBucketLimiter(url=redis_url, rate_per_s=0.001, burst=3, namespace=namespace)
    second = RedisTokenBucketLimiter(url=redis_url, rate_per_s=0.001, burst=3, namespace=namespace)

    assert [first.take(7), second.take(7), first.take(7)] == [0.0, 0.0, 0.0]
    waits = [second.take(7), first.take(7)]

    # one token comes back every 1,000 s: both processes are told to wait about that long
    assert all(990 < wait <= 1000 for wait in waits), waits
    # another key has a bucket of its own
    assert second.take(8) == 0.0


@pytest.mark.redis
def test_the_redis_bucket_fills_again_at_the_rate(redis_url, namespace):
    limiter = RedisTokenBucketLimiter(url=redis_url, rate_per_s=20.0, burst=1, namespace=namespace)
    assert limiter.take("host") == 0.0
    wait = limiter.take("host")
    assert 0 < wait <= 0.05
    time.sleep(wait + 0.02)
    assert limiter.take("host") == 0.0
    # the key goes once its bucket would be full again anyway, so idle tokens leave nothing behind
    ttl_ms = redis.Redis.from_url(redis_url).pttl(f"{namespace}host")
    assert 0 < ttl_ms <= 1050


@pytest.mark.redis
def test_with_redis_a_portal_process_started_later_takes_from_the_same_limit(agent, settings, redis_url, monkeypatch):
    """Two processes of `serve --workers 2` each build their own limiter; the token's limit is one."""
    redis.Redis.from_url(redis_url).flushdb()  # the token's pk repeats across tests
    settings.REDIS_URL = redis_url
    settings.INGEST_RATE_PER_S = 0.01
    settings.INGEST_RATE_BURST = 2
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)])).status_code == 202
    monkeypatch.setattr(ingest_view, "_limiter", None)  # the next request reaches another process
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)])).status_code == 202
    monkeypatch.setattr(ingest_view, "_limiter", None)

    response = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1)]))

    assert response.status_code == 429
    assert 90 < int(response["Retry-After"]) <= 100
    redis.Redis.from_url(redis_url).flushdb()


def test_while_redis_does_not_answer_the_process_limits_on_its_own(caplog):
    clock = StoppedClock()
    dead = f"redis://127.0.0.1:{free_port()}/0"
    limiter = RedisTokenBucketLimiter(url=dead, rate_per_s=1.0, burst=2, namespace="ingest:", clock=clock)

    with caplog.at_level(logging.WARNING, logger="portal.telemetry.ratelimit"):
        waits = [limiter.take("host") for _ in range(3)]

    assert waits == [0.0, 0.0, 1.0]  # not refused for want of Redis, and still limited here
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "Redis did not answer" in warnings[0], warnings


@pytest.fixture
def second_redis():
    """A Redis server of the test's own, to stop and start: "Redis briefly unreachable"."""
    if not shutil.which("redis-server"):
        skip_or_fail("redis-server is not installed (apt-get install redis-server)")
    port = free_port()

    def start() -> subprocess.Popen:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return server
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    servers = []
    yield port, lambda: servers.append(start())
    for server in servers:
        server.terminate()
        server.wait()


@pytest.mark.redis
def test_after_an_outage_the_limit_is_shared_in_redis_again(second_redis, caplog):
    port, start_redis = second_redis
    clock = StoppedClock()
    limiter = RedisTokenBucketLimiter(
        url=f"redis://127.0.0.1:{port}/0", rate_per_s=0.001, burst=2, namespace="ingest:", clock=clock
    )
    assert limiter.take("host") == 0.0  # Redis is not there yet: this process's own bucket

    start_redis()
    assert limiter.take("host") == 0.0  # still its own bucket: Redis is asked again only after a pause
    assert limiter.take("host") > 0
    clock.now += RedisTokenBucketLimiter.RETRY_S

    with caplog.at_level(logging.INFO, logger="portal.telemetry.ratelimit"):
        waits = [limiter.take("host") for _ in range(3)]

    assert waits[:2] == [0.0, 0.0] and math.isclose(waits[2], 1000, rel_tol=0.01)  # Redis's full bucket
    assert redis.Redis(port=port).exists("ingest:host")
    assert any("answers again" in record.getMessage() for record in caplog.records)
