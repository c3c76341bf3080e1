"""SQLite as the embedded default runs it: web server, worker and beat writing to one file.

SQLite's own wait for the write lock (its busy handler) sleeps ever longer between tries, up to
100 ms at a time. A web request waiting behind a run of short transactions (a worker's, a few ms
each, back to back) woke up when the lock was taken, again and again, and waited seconds. Here a
transaction's BEGIN IMMEDIATE is tried every millisecond until the busy timeout instead, and a
background process (the Celery worker: portal.celery) pauses briefly after each commit, so that
a waiting request takes the lock between the worker's transactions, not after all of them.
"""

import time

from django.db import OperationalError
from django.db.backends.sqlite3 import base

POLL_S = 0.001


class DatabaseWrapper(base.DatabaseWrapper):
    # Seconds to pause after each commit: set in background processes only (see portal.celery).
    pause_after_commit_s = 0.0

    def _start_transaction_under_autocommit(self):
        if self.transaction_mode != "IMMEDIATE":
            return super()._start_transaction_under_autocommit()
        timeout_ms = int(self.settings_dict["OPTIONS"].get("timeout", 5) * 1000)
        deadline = time.monotonic() + timeout_ms / 1000
        with self.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 0")
            try:
                while True:
                    try:
                        cursor.execute("BEGIN IMMEDIATE")
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
        if self.pause_after_commit_s:
            time.sleep(self.pause_after_commit_s)
