"""Exactly one Celery beat in a cluster.

Every node of a cluster shares one database, so the lock lives there: a PostgreSQL session-level
advisory lock held by a connection of its own for as long as beat runs (on SQLite, where the
cluster is one machine, an exclusive `flock` on a file under VAR_DIR). A second beat started by
mistake waits for the lock instead of sending every scheduled task twice. A beat that loses its
lock (the database restarted and dropped the session) stops itself; its supervisor (systemd,
`manage.py run`) starts it again, and it waits its turn like any other.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connections

from portal.core import engine

log = logging.getLogger(__name__)

# pg_advisory_lock takes a bigint; this one reads "gfbeat" in ASCII.
BEAT_LOCK_KEY = 0x676662656174
WATCH_INTERVAL_S = 10.0


@dataclass
class BeatLock:
    """A held lock: keep it referenced for as long as the process is the cluster's beat."""

    kind: str
    _connection: object = None
    _file: object = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def held(self) -> bool:
        """Whether this process still holds the lock (asks the database on PostgreSQL)."""
        if self.kind == "file":
            return self._file is not None and not self._file.closed
        try:
            with self._connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND pid = pg_backend_pid() AND ((classid::bigint << 32) | objid::bigint) = %s",
                    [BEAT_LOCK_KEY],
                )
                return cursor.fetchone()[0] > 0
        except Exception:  # noqa: BLE001 (a dropped connection is a lost lock, whatever the error)
            return False

    def release(self) -> None:
        self._stop.set()
        if self.kind == "file":
            if self._file is not None and not self._file.closed:
                self._file.close()  # closing the file releases the flock
            return
        try:
            with self._connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [BEAT_LOCK_KEY])
        except Exception:  # noqa: BLE001 (closing below releases it too)
            pass
        self._connection.close()

    def watch(self, *, on_lost, interval_s: float = WATCH_INTERVAL_S) -> threading.Thread:
        """Check the lock every `interval_s` in a daemon thread; call `on_lost()` once if it goes."""

        def run():
            while not self._stop.wait(interval_s):
                if not self.held():
                    log.critical("beat lost the cluster's beat lock (database connection gone): stopping")
                    on_lost()
                    return

        thread = threading.Thread(target=run, name="beat-lock-watch", daemon=True)
        thread.start()
        return thread


def beat_lock_acquire(*, timeout_s: float | None = None, poll_s: float = 5.0) -> BeatLock | None:
    """Block until this process holds the cluster's beat lock (None when `timeout_s` ran out)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try_once = _pg_try if engine.advisory_locks(connections["default"]) else _file_try
    waiting_said = False
    while True:
        lock = try_once()
        if lock is not None:
            if waiting_said:
                log.warning("beat lock acquired: this beat now sends the schedule")
            return lock
        if not waiting_said:
            log.warning("another beat holds the cluster's beat lock: waiting (only one beat may run)")
            waiting_said = True
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))


def _pg_try() -> BeatLock | None:
    # A connection of its own, outside Django's per-thread handling: the lock lives as long as it.
    connection = connections.create_connection("default")
    # The watch asks through it from its own thread: without this, Django refuses the use from
    # another thread, and a healthy lock looked lost (beat stopped itself after WATCH_INTERVAL_S).
    connection.inc_thread_sharing()
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [BEAT_LOCK_KEY])
        acquired = cursor.fetchone()[0]
    if not acquired:
        connection.close()
        return None
    return BeatLock(kind="postgresql", _connection=connection)


def _file_try() -> BeatLock | None:
    path = Path(settings.VAR_DIR) / "beat.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 (held open for the life of the lock)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return BeatLock(kind="file", _file=handle)


_held: BeatLock | None = None


def beat_lock_for_this_process() -> None:
    """Celery's beat_init: wait for the lock, keep it, and stop this beat if it is ever lost."""
    global _held
    _held = beat_lock_acquire()
    _held.watch(on_lost=lambda: os.kill(os.getpid(), signal.SIGTERM))
