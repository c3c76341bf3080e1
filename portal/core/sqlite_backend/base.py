"""SQLite as the embedded default runs it: web server, worker and beat writing to one file.

SQLite's own wait for the write lock (its busy handler) sleeps ever longer between tries, up to
100 ms at a time. A web request waiting behind a run of short transactions (a worker's, a few ms
each, back to back) woke up when the lock was taken, again and again, and waited seconds. Here a
transaction's BEGIN IMMEDIATE is tried every millisecond until the busy timeout instead, and a
background process (the Celery worker: portal.celery) pauses briefly after each commit, so that
a waiting request takes the lock between the worker's transactions, not after all of them.

SQLITE_SLOW_LOCK_MS logs every transaction that waited for the lock or held it that long, with
the project's code that ran it: how the wear task's reads and the processes' garbage collections
were found holding up ingest (see portal/wear/services.py, portal/ops/heap.py).
"""

import logging
import time
import traceback
from pathlib import Path

from django.conf import settings
from django.db import OperationalError
from django.db.backends.sqlite3 import base

POLL_S = 0.001
logger = logging.getLogger("portal.sqlite")


_PROJECT = str(Path(__file__).resolve().parents[3]) + "/"
_HERE = str(Path(__file__).resolve().parent) + "/"


def _caller() -> str:
    """The project's innermost frames (not its libraries') on the stack, where the transaction
    ends: the code to look at."""
    frames = [
        frame
        for frame in traceback.extract_stack()
        if frame.filename.startswith(_PROJECT)
        and not frame.filename.startswith(_HERE)
        and "-packages/" not in frame.filename
    ]
    return (
        " < ".join(
            f"{frame.name} ({frame.filename.removeprefix(_PROJECT)}:{frame.lineno})" for frame in reversed(frames[-3:])
        )
        or "?"
    )


# A background process's pause after each commit, so a web request waiting for the write lock gets
# it between the worker's transactions (set in the worker's processes only: see portal.celery).
WORKER_PAUSE_AFTER_COMMIT_S = 0.003


class DatabaseWrapper(base.DatabaseWrapper):
    # Seconds to pause after each commit: WORKER_PAUSE_AFTER_COMMIT_S in background processes.
    pause_after_commit_s = 0.0
    # Log a transaction that waited for the write lock, or held it, at least this long (seconds;
    # 0: off), from SQLITE_SLOW_LOCK_MS: finds what delays ingest.
    slow_lock_s = 0.0
    _lock_taken_at = 0.0
    _lock_waited_s = 0.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slow_lock_s = getattr(settings, "SQLITE_SLOW_LOCK_MS", 0) / 1000

    def _start_transaction_under_autocommit(self):
        if self.transaction_mode != "IMMEDIATE":
            return super()._start_transaction_under_autocommit()
        timeout_ms = int(self.settings_dict["OPTIONS"].get("timeout", 5) * 1000)
        asked_at = time.monotonic()
        deadline = asked_at + timeout_ms / 1000
        with self.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 0")
            try:
                while True:
                    try:
                        cursor.execute("BEGIN IMMEDIATE")
                        self._lock_taken_at = time.monotonic()
                        self._lock_waited_s = self._lock_taken_at - asked_at
                        return
                    except OperationalError as error:
                        if "locked" not in str(error) or time.monotonic() >= deadline:
                            raise
                    time.sleep(POLL_S)
            finally:
                # Statements outside transactions (autocommit writes) keep SQLite's own wait.
                cursor.execute(f"PRAGMA busy_timeout = {timeout_ms}")

    def _commit(self):
        super()._commit()
        self._lock_released()
        if self.pause_after_commit_s:
            time.sleep(self.pause_after_commit_s)

    def _rollback(self):
        super()._rollback()
        self._lock_released()

    def _lock_released(self):
        if not self._lock_taken_at:
            return
        held_s = time.monotonic() - self._lock_taken_at
        self._lock_taken_at = 0.0
        if self.slow_lock_s and max(held_s, self._lock_waited_s) >= self.slow_lock_s:
            logger.warning(
                "SQLite write lock: waited %.0f ms, held %.0f ms: %s",
                self._lock_waited_s * 1000,
                held_s * 1000,
                _caller(),
            )
