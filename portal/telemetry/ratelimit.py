"""A token bucket per key: in this process, or in Redis for every process that shares it.

The limit exists to stop a runaway agent, not to meter fairly to the request. Without REDIS_URL
the portal serves from one process (`serve` starts one), so a bucket in memory is the whole
limit. With REDIS_URL, `serve --workers N` and several web nodes would each hold a bucket of
their own, N times the limit: there the bucket lives in Redis, taken from by one Lua script
(atomic, Redis's own clock), one round trip per request.

While Redis does not answer, each process falls back to its own bucket (fails open to the
per-process limit) and asks Redis again after RETRY_S: a runaway agent is still held back, and
ingest is never refused because the limiter's store is down; refusing would only make every
agent spool and retry, which is worse than a few seconds of a looser limit.
"""

import logging
import math
import threading
import time

import redis

log = logging.getLogger(__name__)


class TokenBucketLimiter:
    redis_url = ""  # kept in this process

    def __init__(self, *, rate_per_s: float, burst: int, clock=time.monotonic):
        self.rate = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[object, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key) -> float:
        """Take one request from the key's bucket. Returns 0 if allowed, else seconds to wait."""
        now = self._clock()
        with self._lock:
            tokens, updated = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - updated) * self.rate)
            if tokens >= 1:
                self._buckets[key] = (tokens - 1, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate if self.rate > 0 else math.inf


# The same arithmetic as TokenBucketLimiter.take, on a hash {tokens, at} per key. The time is
# Redis's, so that web nodes with clocks apart agree. Numbers go in and out as strings: Redis
# would truncate a Lua number it returns to an integer.
TAKE_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = '0'
if tokens >= 1 then
  tokens = tokens - 1
elseif rate > 0 then
  wait = string.format('%.6f', (1 - tokens) / rate)
else
  wait = 'inf'
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%.6f', now))
if rate > 0 then
  -- Full again by then: a missing key reads as a full bucket, so the key may go.
  redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
end
return wait
"""


class RedisTokenBucketLimiter:
    """TokenBucketLimiter's buckets kept in Redis under `namespace` + key: one limit for every
    process and node that shares the Redis."""

    # A Redis that does not answer is asked again this long after (seconds of `clock`), so that
    # an outage costs one connect timeout per process every few seconds, not one per request.
    RETRY_S = 5.0
    TIMEOUT_S = 0.5

    def __init__(self, *, url: str, rate_per_s: float, burst: int, namespace: str, clock=time.monotonic):
        self.redis_url = url
        self.rate = rate_per_s
        self.burst = burst
        self.namespace = namespace
        self._clock = clock
        self._client = redis.Redis.from_url(url, socket_connect_timeout=self.TIMEOUT_S, socket_timeout=self.TIMEOUT_S)
        self._script = self._client.register_script(TAKE_SCRIPT)
        self._own = TokenBucketLimiter(rate_per_s=rate_per_s, burst=burst, clock=clock)
        self._retry_at: float | None = None  # set while Redis does not answer

    def take(self, key) -> float:
        """Take one request from the key's bucket. Returns 0 if allowed, else seconds to wait."""
        now = self._clock()
        if self._retry_at is not None and now < self._retry_at:
            return self._own.take(key)
        try:
            wait = float(self._script(keys=[f"{self.namespace}{key}"], args=[repr(float(self.rate)), self.burst]))
        except redis.RedisError as error:
            if self._retry_at is None:
                # The error names the host and port; the URL could hold a password.
                log.warning(
                    "rate limit: Redis did not answer (%s); this process limits on its own until it does", error
                )
            self._retry_at = now + self.RETRY_S
            return self._own.take(key)
        if self._retry_at is not None:
            log.info("rate limit: Redis answers again; one limit for every process")
            self._retry_at = None
        return wait


def rate_limiter(
    *, rate_per_s: float, burst: int, redis_url: str, namespace: str
) -> TokenBucketLimiter | RedisTokenBucketLimiter:
    """In Redis when there is one (REDIS_URL), else in this process."""
    if redis_url:
        return RedisTokenBucketLimiter(url=redis_url, rate_per_s=rate_per_s, burst=burst, namespace=namespace)
    return TokenBucketLimiter(rate_per_s=rate_per_s, burst=burst)
