"""Durable, bounded batch spool in SQLite.

A batch is written here before it is sent and removed only after the portal answered 2xx, so
a crash, a restart or a portal outage loses nothing within the bounds. Batches leave in the
order they came (oldest first), which keeps the portal's view of each GPU in time order.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

SPOOL_FILE = "spool.db"


@dataclass(frozen=True, slots=True)
class SpooledBatch:
    id: int
    batch_id: str
    created_at: float
    body: bytes
    attempts: int


class Spool:
    """Thread-safe: the collector adds while the sender takes, through one locked connection."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = 64 * 1024 * 1024,
        max_age_s: float = 23 * 3600,
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
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # WAL + synchronous=FULL: a committed batch survives a power cut, and readers never
        # block the writer. The agent is the only user of this file.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, batch_id: str, body: bytes, *, created_at: float | None = None) -> int:
        """Store a batch, then enforce the bounds. Returns how many old batches were dropped."""
        created_at = self._clock() if created_at is None else created_at
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO batch (batch_id, created_at, body) VALUES (?, ?, ?)", (batch_id, created_at, body)
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
            self._db.execute(
                "INSERT INTO counter (name, value) VALUES ('dropped_batches', ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                (dropped,),
            )
        return dropped

    def oldest(self) -> SpooledBatch | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, batch_id, created_at, body, attempts FROM batch ORDER BY id LIMIT 1"
            ).fetchone()
        return None if row is None else SpooledBatch(*row)

    def remove(self, row_id: int) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM batch WHERE id = ?", (row_id,))

    def record_attempt(self, row_id: int) -> None:
        with self._lock, self._db:
            self._db.execute("UPDATE batch SET attempts = attempts + 1 WHERE id = ?", (row_id,))

    def reject(self, row_id: int, *, status: int, reason: str) -> None:
        """Set a batch aside for a human to look at; it will never be sent again."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
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
            self._db.execute(
                "INSERT INTO counter (name, value) VALUES ('rejected_batches', 1) "
                "ON CONFLICT(name) DO UPDATE SET value = value + 1"
            )

    def counter(self, name: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT value FROM counter WHERE name = ?", (name,)).fetchone()
        return 0 if row is None else row[0]

    def pending_ids(self) -> list[str]:
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT batch_id FROM batch ORDER BY id")]

    def rejected(self) -> list[tuple[str, int, str]]:
        with self._lock:
            return list(self._db.execute("SELECT batch_id, status, reason FROM rejected ORDER BY id"))
