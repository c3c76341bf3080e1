"""Background work on SQLite that keeps the write lock short.

SQLite has one writer at a time, and the web server's ingest waits for whoever holds the lock.
A background pass (rollups, rule evaluation) that read and computed inside its write
transaction held the lock for hundreds of milliseconds, and every ingest request queued behind
it. Such a pass instead reads and computes without the lock (WAL readers never wait) and
takes it only to write. `serialized(name)` keeps two passes of one kind from overlapping
meanwhile, across processes (a file lock next to the database): what one pass read is then
still what it writes over, as long as only passes of that kind write it.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
from collections.abc import Iterator

from django.db import connection

_thread_locks: dict[str, threading.RLock] = {}


def reads_outside_write_lock() -> bool:
    """Whether a background pass should read before it takes the write lock: on SQLite, unless
    the caller already holds a transaction (then everything runs in it, as before)."""
    return connection.vendor == "sqlite" and not connection.in_atomic_block


@contextlib.contextmanager
def serialized(name: str) -> Iterator[None]:
    """One pass of this kind at a time on this SQLite database, in every process."""
    database = str(connection.settings_dict["NAME"])
    if connection.is_in_memory_db():  # tests: one process
        lock = _thread_locks.setdefault(f"{database}:{name}", threading.RLock())
        with lock:
            yield
        return
    with open(f"{database}.{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
