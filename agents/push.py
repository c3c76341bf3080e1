"""Delivery to the portal: gzip POST over urllib, and the loop that drains the spool.

The portal's answer decides a batch's fate (protocol "Answers"): 2xx done; 5xx, 429 or no
answer: the same batch again later, with a short exponential backoff and jitter (from 0.1 s,
capped at 5 s as Prometheus' default, Retry-After honoured), as Prometheus' remote write does. A backlog leaves packed
into large posts (the spool merges untried batches up to the protocol's limits before sending).

Some refusals are fixed by a person within hours, not by changing the batch: a revoked or
rotated token (401), a GPU moved to another host (403), a skewed clock (400 on timestamps), or an
answer that is not the portal's own (a 400 from Django's host check for a mistyped
ALLOWED_HOSTS, a proxy's 404, a 3xx for a wrong URL). Those are "held": the batch stays at the
head of the queue and is retried slowly (30 s, up to 10 min), logged at ERROR every time. Any
other 4xx is the portal's verdict on that batch: a merged batch is cut in two to find the
refused part, a single one is set aside (`python -m agents --replay-rejected` puts it back).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import ssl
import threading
import time
import tomllib
import urllib.error
import urllib.request
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal

from agents import __version__
from agents.collector import rfc3339
from agents.spool import MAX_POST_BYTES, MAX_POST_READINGS, Spool

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/ingest"
MAX_RETRY_AFTER_S = 3600.0
# An accepted batch's answer may carry commands (ingest-v1 "Commands"): read all of it, bounded.
MAX_ANSWER_BYTES = 256 * 1024


def ingest_url(base: str) -> str:
    """Accept the portal's base URL or the full ingest URL."""
    base = base.rstrip("/")
    return base if base.endswith(INGEST_PATH) else base + INGEST_PATH


@dataclass(frozen=True, slots=True)
class SendResult:
    outcome: Literal["done", "retry", "hold", "reject"]
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


def portal_opener(url: str, ca_file: str | None = None) -> urllib.request.OpenerDirector:
    """The one way the agent talks to its portal (push, doctor, enrol, rotate-token): redirects are
    not followed (a redirect would carry the token, or the code, to wherever it points, and turn a
    POST into a GET), and TLS verification is always on; a private CA is added, never a way to
    switch it off."""
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if url.startswith("https:"):
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file)))
    return urllib.request.build_opener(*handlers)


def classify_refusal(status: int, detail: str) -> Literal["retry", "hold", "reject"]:
    """What a 3xx/4xx/5xx means for the batch (see the module docstring)."""
    if status == 429 or status == 408 or status >= 500:
        return "retry"
    if status < 400 or status in (401, 403):  # 3xx: a wrong URL (http for https, a moved portal)
        return "hold"
    try:
        payload = json.loads(detail)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or "error" not in payload:
        # Not the portal's answer about this batch: Django's host check, a proxy, a wrong path.
        return "hold"
    locs = [str(item.get("loc", "")) for item in payload.get("detail") or [] if isinstance(item, dict)]
    if status == 400 and locs and all(loc.endswith(".ts") for loc in locs):
        return "hold"  # timestamps out of the window: a clock (ours or the portal's) is off
    return "reject"


HOLD_HINTS = {
    401: "the host token is revoked or rotated: put the new one in GPU_AGENT_TOKEN or the token file",
    403: "a GPU or this host name belongs to another host at the portal: an admin must move it",
    400: "timestamps outside the portal's window: check this host's clock (NTP) and the portal's, "
    "or the portal's ALLOWED_HOSTS if the answer is not JSON",
}


PLAIN_HTTP_REFUSED = "plain HTTP refused"


def hold_hint(status: int | None, detail: str) -> str:
    if status == 403 and PLAIN_HTTP_REFUSED in detail:
        return (
            "the portal takes batches over HTTPS only: set an https:// URL (on a trusted LAN the portal's "
            "admin may set PLAIN_HTTP=true instead). Nothing is delivered until this is fixed"
        )
    return HOLD_HINTS.get(status or 0, "the portal URL or a proxy in front of the portal")


class Sender:
    def __init__(
        self,
        *,
        url: str,
        token: str,
        timeout_s: float = 10.0,
        ca_file: str | None = None,
        token_file: str | None = None,
        token_source: tuple[str, str] | None = None,
    ) -> None:
        self.url = ingest_url(url)
        self.base_url = self.url[: -len(INGEST_PATH)]
        self._token = token
        self._token_file = token_file
        self._timeout_s = timeout_s
        self._opener = portal_opener(self.url, ca_file)
        # The file the token came from (config.token_location): when it changes (rotate-token
        # replaced it), the next send uses the token it now holds.
        self._token_source = token_source
        self._token_stamp = _stamp(token_source[1]) if token_source else None

    def _refresh_token(self) -> None:
        if self._token_source is None:
            return
        kind, path = self._token_source
        stamp = _stamp(path)
        if stamp == self._token_stamp:
            return
        self._token_stamp = stamp
        try:
            token = read_token(kind, path)
        except (OSError, ValueError) as exc:
            log.error("the token's file %s changed but cannot be read (%s); keeping the token in use", path, exc)
            return
        if token and token != self._token:
            log.warning("the token in %s changed (rotated?); using the new one from this send on", path)
            self._token = token

    def send(self, body: bytes) -> SendResult:
        self._refresh_token()
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
        return self._open(request)

    def post_json(self, path: str, body: bytes) -> SendResult:
        """POST a small JSON document to another endpoint of the portal (path from its root)
        with the host token; the answer classified as for a batch."""
        request = urllib.request.Request(
            self.base_url + path,
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "User-Agent": f"gpu-fleet-agent/{__version__}",
            },
        )
        return self._open(request)

    def _open(self, request: urllib.request.Request) -> SendResult:
        try:
            with self._opener.open(request, timeout=self._timeout_s) as response:
                return SendResult("done", response.status, response.read(MAX_ANSWER_BYTES).decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            status = exc.code
            detail = _read_detail(exc)
            outcome = classify_refusal(status, detail)
            if outcome == "hold" and status == 401 and self._reread_token():
                outcome = "retry"  # a rotated token: the file already holds the new one
            return SendResult(outcome, status, detail, parse_retry_after(exc.headers.get("Retry-After")))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            # Connection refused, reset, DNS, TLS, timeout (socket.timeout is an OSError).
            return SendResult("retry", None, f"{type(exc).__name__}: {exc}")

    def _reread_token(self) -> bool:
        if not self._token_file:
            return False
        try:
            with open(self._token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as exc:
            log.error("re-reading the token file %s failed: %s", self._token_file, exc)
            return False
        if not token or token == self._token:
            return False
        log.warning("the token file %s holds a new token; using it", self._token_file)
        self._token = token
        return True


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def read_token(kind: str, path: str) -> str:
    """The token a config file ("config": its `token` key) or a token file ("file") holds."""
    if kind == "config":
        with open(path, "rb") as handle:
            token = tomllib.load(handle).get("token")
        if not isinstance(token, str):
            raise ValueError("no token key")
        return token.strip()
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


def _read_detail(exc: urllib.error.HTTPError) -> str:
    try:
        return exc.read(2000).decode(errors="replace")
    except OSError:
        return ""


class Backoff:
    """Exponential backoff with "equal jitter": half the step fixed, half random, so that many
    hosts coming back after an outage spread out, yet none retries almost at once."""

    def __init__(self, *, initial_s: float = 0.1, max_s: float = 5.0, rng: random.Random | None = None) -> None:
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


def _refused_in_readings(result: SendResult) -> bool:
    """Too large, or refused for some of its readings (not its host or inventory, which every
    piece would carry): cutting it in two can save the rest."""
    if result.status == 413:
        return True
    try:
        detail = json.loads(result.detail).get("detail") or []
        locs = [str(item["loc"]) for item in detail]
    except (ValueError, AttributeError, KeyError, TypeError):
        return False
    return bool(locs) and all(loc.startswith("readings.") for loc in locs)


class MemoryQueue:
    """Batches that could not be written to the spool (a full or broken disk), oldest first,
    bounded in bytes (compressed); shared by the collecting thread and the sender."""

    def __init__(self, *, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        # [batch_id, compressed body, has inventory, tried (may have reached the portal)]
        self.items: deque[list] = deque()
        self.size = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.items)

    def push(self, batch_id: str, body: bytes, *, has_inventory: bool) -> bool:
        """Keep a batch; returns False if an older one carrying the inventory had to go."""
        item = [batch_id, zlib.compress(body, 6), has_inventory, False]
        lost_inventory = False
        with self.lock:
            self.items.append(item)
            self.size += len(item[1])
            while self.size > self.max_bytes and len(self.items) > 1:
                old = self.items.popleft()
                self.size -= len(old[1])
                self.dropped += 1
                lost_inventory |= old[2]
                log.error("memory queue over %d bytes: dropped batch %s", self.max_bytes, old[0])
        return not lost_inventory

    def head(self) -> tuple[str, bytes] | None:
        with self.lock:
            if not self.items:
                return None
            self.items[0][3] = True
            return self.items[0][0], zlib.decompress(self.items[0][1])

    def discard(self, batch_id: str) -> None:
        with self.lock:
            if self.items and self.items[0][0] == batch_id:
                old = self.items.popleft()
                self.size -= len(old[1])


class Deliverer:
    """Drains the spool, oldest first, in posts as large as the protocol allows; runs in its own thread."""

    def __init__(
        self,
        *,
        spool: Spool,
        sender: Sender,
        backoff: Backoff,
        hold_backoff: Backoff | None = None,
        on_reject: Callable[[], None] | None = None,
        on_answer: Callable[[str], None] | None = None,
        idle_wait_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        memory: MemoryQueue | None = None,
        max_post_readings: int = MAX_POST_READINGS,
        max_post_bytes: int = MAX_POST_BYTES,
    ) -> None:
        self._spool = spool
        self._sender = sender
        self._backoff = backoff
        self._hold_backoff = hold_backoff or Backoff(initial_s=30.0, max_s=600.0)
        self._on_reject = on_reject
        # Every accepted batch's answer, for the commands it may carry (agents.commands).
        self._on_answer = on_answer
        self._idle_wait_s = idle_wait_s
        self._clock = clock
        self._memory = memory
        self.max_post_readings = max_post_readings
        self.max_post_bytes = max_post_bytes
        self.wake = threading.Event()
        self.delivered = 0  # batches the portal accepted (a merged post counts once)
        self.posts = 0

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
        """Try the oldest batch once. None: nothing to send; else seconds to wait before the next try."""
        self._spool.enforce_bounds()
        # Merged (if it can be) and marked as tried, durably, before it leaves: a retry after
        # a timeout is the very same batch.
        batch = self._spool.next_to_send(max_readings=self.max_post_readings, max_bytes=self.max_post_bytes)
        if batch is None:
            return self._step_memory()
        self.posts += 1
        if batch.parts > 1:
            log.info("backlog: %d spooled batches merged into batch %s (%d bytes)", batch.parts, batch.batch_id,
                     len(batch.body))  # fmt: skip
        result = self._sender.send(with_sent_at(batch.body, self._clock()))
        if result.outcome == "done":
            self._spool.remove(batch.id)
            self._backoff.reset()
            self._hold_backoff.reset()
            self.delivered += 1
            log.debug("batch %s delivered (%s, %d part(s))", batch.batch_id, result.status, batch.parts)
            self._answered(result)
            return 0.0
        if result.outcome == "reject":
            # The portal refused it whole, so stored nothing of it: a batch of several parts is
            # cut in two (new batch_ids) until the refused part stands alone; the rest goes on.
            if result.status == 413:
                self.max_post_bytes = max(64 * 1024, min(self.max_post_bytes, len(batch.body)) // 2)
            if _refused_in_readings(result) and self._spool.split(batch.id):
                log.warning(
                    "portal refused batch %s (HTTP %s, %d bytes) whole; cut in two to find the refused part: %s",
                    batch.batch_id,
                    result.status,
                    len(batch.body),
                    result.detail[:300],
                )
                return 0.0
            self._spool.reject(batch.id, status=result.status or 0, reason=result.detail)
            log.error(
                "PORTAL REJECTED batch %s with HTTP %s: %s; set aside in %s (table 'rejected'); "
                "once the cause is fixed, `python -m agents --replay-rejected` sends it again",
                batch.batch_id,
                result.status,
                result.detail[:500],
                self._spool.path,
            )
            if self._on_reject:
                self._on_reject()
            return 0.0
        if result.outcome == "hold":
            delay = self._hold_backoff.next_delay(result.retry_after)
            log.error(
                "PORTAL REFUSED batch %s with HTTP %s: %s. Kept, with everything after it (%s); retry #%d in "
                "%.0f s. Likely cause: %s",
                batch.batch_id,
                result.status,
                result.detail[:300],
                self._spool.path,
                self._hold_backoff.failures,
                delay,
                hold_hint(result.status, result.detail),
            )
            return delay
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

    def _answered(self, result: SendResult) -> None:
        if self._on_answer is None:
            return
        try:
            self._on_answer(result.detail)
        except Exception:
            # Commands must never stop delivery.
            log.exception("handling the portal's answer failed")

    def _step_memory(self) -> float | None:
        """The spool is empty (or could not be written): send what waits in memory, oldest first."""
        head = self._memory.head() if self._memory is not None else None
        if head is None:
            return None
        batch_id, body = head
        self.posts += 1
        result = self._sender.send(with_sent_at(body, self._clock()))
        if result.outcome == "done":
            self._memory.discard(batch_id)
            self._backoff.reset()
            self.delivered += 1
            self._answered(result)
            return 0.0
        if result.outcome == "reject":
            self._memory.discard(batch_id)
            log.error("PORTAL REJECTED batch %s (held in memory, spool unwritable) with HTTP %s: %s; dropped",
                      batch_id, result.status, result.detail[:500])  # fmt: skip
            if self._on_reject:
                self._on_reject()
            return 0.0
        backoff = self._hold_backoff if result.outcome == "hold" else self._backoff
        delay = backoff.next_delay(result.retry_after)
        log.log(
            logging.ERROR if result.outcome == "hold" or backoff.failures > 3 else logging.WARNING,
            "%s batch %s (held in memory) with %s %s; retry in %.1f s",
            "PORTAL REFUSED" if result.outcome == "hold" else "sending failed for",
            batch_id,
            result.status or "no answer",
            result.detail[:200],
            delay,
        )
        return delay
