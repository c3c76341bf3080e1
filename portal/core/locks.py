"""A lock that keeps one pass of some background work at a time across the cluster.

Every process of a cluster shares one database, so the lock lives with it: a PostgreSQL
session-level advisory lock (released when the pass ends, or when its connection goes); on SQLite,
where the cluster is one machine, an exclusive `flock` on a file beside the database (a thread lock
for the tests' in-memory database). A pass that finds the lock taken does not wait: the holder
looks for new work after it lets go (see portal.telemetry.pipeline).
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import zlib
from collections.abc import Iterator

from django.db import connection

from portal.core import engine

_thread_locks: dict[str, threading.Lock] = {}


def advisory_key(name: str) -> int:
    return 0x6766_0000_0000 | zlib.crc32(name.encode())  # "gf" + the name's checksum: stable across processes


@contextlib.contextmanager
def pass_lock(name: str) -> Iterator[bool]:
    """Yields whether this process now holds the cluster's `name` lock (False: another holds it)."""
    if engine.advisory_locks():
        key = advisory_key(name)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            held = cursor.fetchone()[0]
        try:
            yield held
        finally:
            if held:
                try:
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
                except Exception:  # noqa: BLE001 (a connection that is gone took the lock with it)
                    connection.close()
        return
    database = str(connection.settings_dict["NAME"])
    if connection.is_in_memory_db():
        lock = _thread_locks.setdefault(f"{database}:{name}", threading.Lock())
        held = lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                lock.release()
        return
    with open(f"{database}.{name}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
