"""Delivery to the portal: gzip POST over urllib, and the loop that drains the spool.

The portal's answer decides a batch's fate (protocol "Answers"): 2xx done; 5xx, 429 or no
answer: the same batch again later, with exponential backoff and jitter; any other 4xx: it
will never be accepted, so it is set aside and the agent moves on. 3xx is a misconfigured URL:
retried (and logged) so no data is lost while someone fixes the configuration.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal

from agents import __version__
from agents.collector import rfc3339
from agents.spool import Spool

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/ingest"
MAX_RETRY_AFTER_S = 3600.0


def ingest_url(base: str) -> str:
    """Accept the portal's base URL or the full ingest URL."""
    base = base.rstrip("/")
    return base if base.endswith(INGEST_PATH) else base + INGEST_PATH


@dataclass(frozen=True, slots=True)
class SendResult:
    outcome: Literal["done", "retry", "reject"]
    status: int | None
    detail: str
    retry_after: float | None = None


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Retry-After is either delta-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib would turn a redirected POST into a GET without the body; surface it instead.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Sender:
    def __init__(self, *, url: str, token: str, timeout_s: float = 10.0, ca_file: str | None = None) -> None:
        self.url = ingest_url(url)
        self._token = token
        self._timeout_s = timeout_s
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        if self.url.startswith("https:"):
            # Verification is always on; a private CA is added, never a way to switch it off.
            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file)))
        self._opener = urllib.request.build_opener(*handlers)

    def send(self, body: bytes) -> SendResult:
        request = urllib.request.Request(
            self.url,
            data=gzip.compress(body, compresslevel=6),
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                "User-Agent": f"gpu-fleet-agent/{__version__}",
            },
        )
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                return SendResult("done", response.status, response.read(2000).decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            status = exc.code
            detail = _read_detail(exc)
            if status == 429 or status >= 500 or status < 400:
                return SendResult("retry", status, detail, parse_retry_after(exc.headers.get("Retry-After")))
            return SendResult("reject", status, detail)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            # Connection refused, reset, DNS, TLS, timeout (socket.timeout is an OSError).
            return SendResult("retry", None, f"{type(exc).__name__}: {exc}")


def _read_detail(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(2000).decode(errors="replace")
    except OSError:
        return ""


class Backoff:
    """Exponential backoff with "equal jitter": half the step fixed, half random, so that many
    hosts coming back after an outage spread out, yet none retries almost at once."""

    def __init__(self, *, initial_s: float = 1.0, max_s: float = 300.0, rng: random.Random | None = None) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.failures = 0
        self._rng = rng or random.Random()

    def reset(self) -> None:
        self.failures = 0

    def next_delay(self, retry_after: float | None = None) -> float:
        step = min(self.max_s, self.initial_s * 2 ** min(self.failures, 30))
        self.failures += 1
        delay = step / 2 + self._rng.uniform(0, step / 2)
        return max(delay, retry_after or 0.0)


def with_sent_at(body: bytes, now: float) -> bytes:
    # sent_at is the moment of this attempt, not of collection, so that the portal can measure
    # clock skew and delivery delay even for a batch that waited in the spool.
    batch = json.loads(body)
    batch["sent_at"] = rfc3339(now)
    return json.dumps(batch, separators=(",", ":")).encode()


class Deliverer:
    """Drains the spool, oldest first, one batch at a time; runs in its own thread."""

    def __init__(
        self,
        *,
        spool: Spool,
        sender: Sender,
        backoff: Backoff,
        on_reject: Callable[[str], None] | None = None,
        idle_wait_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._spool = spool
        self._sender = sender
        self._backoff = backoff
        self._on_reject = on_reject
        self._idle_wait_s = idle_wait_s
        self._clock = clock
        self.wake = threading.Event()
        self.delivered = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                delay = self.step()
            except Exception:
                # E.g. a full disk under the spool: keep the thread alive and try again later.
                log.exception("delivery step failed")
                delay = self._backoff.next_delay()
            if delay is None:
                self.wake.wait(self._idle_wait_s)
                self.wake.clear()
            elif delay > 0:
                stop.wait(delay)

    def drain(self, stop: threading.Event | None = None, *, max_seconds: float = 30.0) -> bool:
        """Send until the spool is empty (True) or time runs out (False); for --once."""
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline and not (stop and stop.is_set()):
            delay = self.step()
            if delay is None:
                return True
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        return self._spool.oldest() is None

    def step(self) -> float | None:
        """Try the oldest batch once. None: spool empty; else seconds to wait before the next try."""
        self._spool.enforce_bounds()
        batch = self._spool.oldest()
        if batch is None:
            return None
        result = self._sender.send(with_sent_at(batch.body, self._clock()))
        if result.outcome == "done":
            self._spool.remove(batch.id)
            self._backoff.reset()
            self.delivered += 1
            log.debug("batch %s delivered (%s)", batch.batch_id, result.status)
            return 0.0
        if result.outcome == "reject":
            self._spool.reject(batch.id, status=result.status or 0, reason=result.detail)
            log.error(
                "PORTAL REJECTED batch %s with HTTP %s: %s; set aside in %s (table 'rejected')",
                batch.batch_id,
                result.status,
                result.detail[:500],
                self._spool.path,
            )
            if self._on_reject:
                self._on_reject(batch.batch_id)
            return 0.0
        self._spool.record_attempt(batch.id)
        delay = self._backoff.next_delay(result.retry_after)
        level = logging.WARNING if self._backoff.failures <= 3 else logging.ERROR
        log.log(
            level,
            "sending batch %s failed (%s %s); retry #%d in %.1f s",
            batch.batch_id,
            result.status or "no answer",
            result.detail[:200],
            self._backoff.failures,
            delay,
        )
        return delay
