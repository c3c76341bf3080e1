"""A token bucket per key, in this process.

Each server process limits on its own: with N processes a token gets up to N times the rate.
That is the intended trade: no shared store on the ingest hot path, and the limit exists to
stop a runaway agent, not to meter fairly to the request.
"""

import math
import threading
import time


class TokenBucketLimiter:
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
