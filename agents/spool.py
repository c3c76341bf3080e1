"""Durable, bounded batch spool in SQLite.

A batch is written here before it is sent and removed only after the portal answered 2xx, so
a crash, a restart or a portal outage loses nothing within the bounds. Batches leave in the
order they came (oldest first), which keeps the portal's view of each GPU in time order.

Bodies are stored zlib-compressed (a week of readings fits in tens of MB). A batch that has
never been tried may be merged with the ones after it into one large batch, under a new
`batch_id`, in one transaction; a batch is marked as tried (`attempts` > 0) in the same or an
earlier transaction than its first send, and from then on it is never changed, so a retry after
a timeout carries the same `batch_id` and the portal's dedupe holds.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS batch (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    body BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS rejected (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    rejected_at REAL NOT NULL,
    status INTEGER NOT NULL,
    reason TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS counter (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


def durable_sqlite(target: str | Path, schema: str, *, on_disk: bool = True) -> sqlite3.Connection:
    """An agent's SQLite store (the spool, diagnostics.db): on disk with WAL + synchronous=FULL, so a
    committed row survives a power cut and readers never block the writer; checked (quick_check)
    and given `schema`. A store that fails the check raises sqlite3.DatabaseError, closed."""
    db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=30)
    try:
        if on_disk:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            check = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {check}")
        db.executescript(schema)
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


SPOOL_FILE = "spool.db"
# The protocol's limits for one post: 5,000 readings, 1 MiB of JSON; a little under the latter,
# since sent_at is rewritten at each attempt.
MAX_POST_READINGS = 5000
MAX_POST_BYTES = 1024 * 1024 - 16 * 1024
# Host fields that differ between batches without meaning a change (totals that only grow).
_HOST_COUNTERS = ("dropped_batches", "rejected_batches")


def compress(body: bytes) -> bytes:
    return zlib.compress(body, 6)


def decompress(stored: bytes) -> bytes:
    # Spools written by earlier agent versions hold plain JSON.
    return stored if stored[:1] == b"{" else zlib.decompress(stored)


@dataclass(frozen=True, slots=True)
class SpooledBatch:
    id: int
    batch_id: str
    created_at: float
    body: bytes
    attempts: int
    parts: int = 1  # how many spooled batches were merged into this one


class Spool:
    """Thread-safe: the collector adds while the sender takes, through one locked connection."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = 256 * 1024 * 1024,
        max_age_s: float = 167 * 3600,
        keep_rejected: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(directory) / SPOOL_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.keep_rejected = keep_rejected
        self._clock = clock
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            # A corrupt file would otherwise stop every start (a crash loop under systemd):
            # keep it for a person to look at, and go on with a fresh spool.
            aside = self._move_aside()
            log.error("spool %s is corrupt (%s): moved aside to %s; starting a fresh spool", self.path, exc, aside.name)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        # `--replay-rejected` may write from a second process.
        return durable_sqlite(self.path, SCHEMA)

    def _move_aside(self) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock()))
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(str(self.path) + suffix)
            if source.exists():
                os.replace(source, Path(str(aside) + suffix))
        return aside

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, batch_id: str, body: bytes, *, created_at: float | None = None, tried: bool = False) -> int:
        """Store a batch, then enforce the bounds. Returns how many old batches were dropped.
        `tried`: the batch may already have reached the portal, so it must never be merged."""
        created_at = self._clock() if created_at is None else created_at
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO batch (batch_id, created_at, body, attempts) VALUES (?, ?, ?, ?)",
                (batch_id, created_at, compress(body), int(tried)),
            )
            return self._enforce_bounds_locked()

    def enforce_bounds(self) -> int:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            return self._enforce_bounds_locked()

    def _enforce_bounds_locked(self) -> int:
        dropped_old = self._db.execute(
            "DELETE FROM batch WHERE created_at < ?", (self._clock() - self.max_age_s,)
        ).rowcount
        if dropped_old:
            log.error(
                "spool: dropped %d batch(es) older than %.0f s that were never accepted", dropped_old, self.max_age_s
            )
        dropped_big = 0
        total = self._db.execute("SELECT COALESCE(SUM(LENGTH(body)), 0) FROM batch").fetchone()[0]
        if total > self.max_bytes:
            # Oldest first, but always keep the newest batch even if it alone is over the bound.
            rows = self._db.execute("SELECT id, LENGTH(body) FROM batch ORDER BY id").fetchall()
            victims = []
            for row_id, size in rows[:-1]:
                if total <= self.max_bytes:
                    break
                victims.append((row_id,))
                total -= size
            self._db.executemany("DELETE FROM batch WHERE id = ?", victims)
            dropped_big = len(victims)
            log.error("spool: over %d bytes, dropped the %d oldest batch(es)", self.max_bytes, dropped_big)
        dropped = dropped_old + dropped_big
        if dropped:
            self._count_locked("dropped_batches", dropped)
        return dropped

    def _count_locked(self, name: str, amount: int) -> None:
        self._db.execute(
            "INSERT INTO counter (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            (name, amount),
        )

    def oldest(self) -> SpooledBatch | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, batch_id, created_at, body, attempts FROM batch ORDER BY id LIMIT 1"
            ).fetchone()
        return None if row is None else SpooledBatch(row[0], row[1], row[2], decompress(row[3]), row[4])

    def next_to_send(
        self, *, max_readings: int = MAX_POST_READINGS, max_bytes: int = MAX_POST_BYTES
    ) -> SpooledBatch | None:
        """The batch to send now, marked as tried, durably, before it leaves.

        If the oldest batch was never tried, it is merged with the untried batches after it (in
        order, up to the limits, never across an inventory or host change) into one batch with a
        new batch_id, in the same transaction. A batch whose stored body cannot be read is set
        aside (table `rejected`, status 0) rather than stopping the queue."""
        while True:
            with self._lock, self._db:
                self._db.execute("BEGIN IMMEDIATE")
                head = self._db.execute(
                    "SELECT id, batch_id, created_at, body, attempts FROM batch ORDER BY id LIMIT 1"
                ).fetchone()
                if head is None:
                    return None
                row_id, batch_id, created_at, stored, attempts = head
                try:
                    body = decompress(stored)
                    if attempts:
                        self._db.execute("UPDATE batch SET attempts = attempts + 1 WHERE id = ?", (row_id,))
                        return SpooledBatch(row_id, batch_id, created_at, body, attempts + 1)
                    return self._merge_locked(row_id, batch_id, created_at, body, max_readings, max_bytes)
                except (zlib.error, ValueError, KeyError, TypeError) as exc:
                    self._reject_locked(row_id, status=0, reason=f"unreadable in the spool: {exc}")
                    log.error("spool: batch %s is unreadable (%s); set aside in table 'rejected'", batch_id, exc)

    def _merge_locked(
        self, row_id: int, batch_id: str, created_at: float, body: bytes, max_readings: int, max_bytes: int
    ) -> SpooledBatch:
        first = json.loads(body)
        readings: list[bytes] = [json.dumps(r, separators=(",", ":")).encode() for r in first["readings"]]
        size = len(body)
        host, gpus = first["host"], first.get("gpus")
        merged_ids: list[int] = []
        cursor = self._db.execute(
            "SELECT id, body, attempts FROM batch WHERE id > ? ORDER BY id LIMIT 20000", (row_id,)
        )
        for other_id, other_stored, other_attempts in cursor:
            if other_attempts:
                break
            try:
                other = json.loads(decompress(other_stored))
            except (zlib.error, ValueError):
                break  # next_to_send sets it aside once it is the head
            other_gpus = other.get("gpus")
            if _host_identity(other["host"]) != _host_identity(host):
                break
            if other_gpus is not None and other_gpus != gpus:
                break  # an inventory change starts a new post, so the portal sees it in its place
            more = [json.dumps(r, separators=(",", ":")).encode() for r in other["readings"]]
            more_size = sum(len(r) + 1 for r in more)
            if len(readings) + len(more) > max_readings or size + more_size > max_bytes:
                break
            readings += more
            size += more_size
            host = other["host"]  # the newest totals
            merged_ids.append(other_id)
        cursor.close()
        if not merged_ids:
            self._db.execute("UPDATE batch SET attempts = 1 WHERE id = ?", (row_id,))
            return SpooledBatch(row_id, batch_id, created_at, body, 1)
        new_id = str(uuid.uuid4())
        head: dict[str, Any] = {"batch_id": new_id, "host": host}
        if gpus is not None:
            head["gpus"] = gpus
        prefix = json.dumps(head, separators=(",", ":")).encode()
        merged = prefix[:-1] + b',"readings":[' + b",".join(readings) + b"]}"
        self._db.execute(
            "UPDATE batch SET batch_id = ?, body = ?, attempts = 1 WHERE id = ?", (new_id, compress(merged), row_id)
        )
        self._db.executemany("DELETE FROM batch WHERE id = ?", [(i,) for i in merged_ids])
        return SpooledBatch(row_id, new_id, created_at, merged, 1, parts=1 + len(merged_ids))

    def split(self, row_id: int) -> bool:
        """Cut a batch the portal refused whole (so stored nothing of) in two, under new
        batch_ids, in its place in the queue; False if it cannot be cut (one reading, or no room
        in the queue's order, i.e. it was never a merge of several)."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute("SELECT created_at, body FROM batch WHERE id = ?", (row_id,)).fetchone()
            following = self._db.execute("SELECT MIN(id) FROM batch WHERE id > ?", (row_id,)).fetchone()[0]
            if row is None:
                return False
            room = (following - row_id) if following is not None else 2
            batch = json.loads(decompress(row[1]))
            readings = batch["readings"]
            if len(readings) < 2 or room < 2:
                return False
            second_id = row_id + room // 2 if following is not None else None
            half = len(readings) // 2
            for target, part in ((row_id, readings[:half]), (second_id, readings[half:])):
                piece = {**batch, "batch_id": str(uuid.uuid4()), "readings": part}
                body = compress(json.dumps(piece, separators=(",", ":")).encode())
                # Marked as tried: a cut piece is never merged again (it would only form the
                # same refused batch once more).
                if target == row_id:
                    self._db.execute(
                        "UPDATE batch SET batch_id = ?, body = ?, attempts = 1 WHERE id = ?",
                        (piece["batch_id"], body, row_id),
                    )
                else:
                    self._db.execute(
                        "INSERT INTO batch (id, batch_id, created_at, body, attempts) VALUES (?, ?, ?, ?, 1)",
                        (target, piece["batch_id"], row[0], body),
                    )
            return True

    def remove(self, row_id: int) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM batch WHERE id = ?", (row_id,))

    def reject(self, row_id: int, *, status: int, reason: str) -> None:
        """Set a batch aside for a human to look at; `replay_rejected` puts it back in the queue."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._reject_locked(row_id, status=status, reason=reason)

    def _reject_locked(self, row_id: int, *, status: int, reason: str) -> None:
        self._db.execute(
            "INSERT INTO rejected (batch_id, created_at, rejected_at, status, reason, body) "
            "SELECT batch_id, created_at, ?, ?, ?, body FROM batch WHERE id = ?",
            (self._clock(), status, reason[:4000], row_id),
        )
        self._db.execute("DELETE FROM batch WHERE id = ?", (row_id,))
        self._db.execute(
            "DELETE FROM rejected WHERE id NOT IN (SELECT id FROM rejected ORDER BY id DESC LIMIT ?)",
            (self.keep_rejected,),
        )
        self._count_locked("rejected_batches", 1)

    def replay_rejected(self) -> int:
        """Put every set-aside batch back in the queue, ahead of the rest (they are older), each
        with its own batch_id and never merged: the portal refused it whole, so stored nothing."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            rows = self._db.execute("SELECT id, batch_id, created_at, body FROM rejected ORDER BY id").fetchall()
            if not rows:
                return 0
            first = self._db.execute("SELECT MIN(id) FROM batch").fetchone()[0]
            start = (first - len(rows)) if first is not None else None
            for position, (rejected_id, batch_id, created_at, body) in enumerate(rows):
                new_id = None if start is None else start + position
                # A batch id seen again (replayed twice) keeps the first copy.
                self._db.execute(
                    "INSERT OR IGNORE INTO batch (id, batch_id, created_at, body, attempts) VALUES (?, ?, ?, ?, 1)",
                    (new_id, batch_id, created_at, body),
                )
                self._db.execute("DELETE FROM rejected WHERE id = ?", (rejected_id,))
            return len(rows)

    def counter(self, name: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT value FROM counter WHERE name = ?", (name,)).fetchone()
        return 0 if row is None else row[0]

    def pending_ids(self) -> list[str]:
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT batch_id FROM batch ORDER BY id")]

    def pending_count(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM batch").fetchone()[0]

    def rejected(self) -> list[tuple[str, int, str]]:
        with self._lock:
            return list(self._db.execute("SELECT batch_id, status, reason FROM rejected ORDER BY id"))


def _host_identity(host: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in host.items() if key not in _HOST_COUNTERS}
