"""Sends at most once per interval, with one trailing send for whatever came meanwhile."""

import logging
import threading
import time

log = logging.getLogger(__name__)


class Debouncer:
    def __init__(self, interval_s: float, send, clock=time.monotonic):
        self.interval_s = interval_s
        self._send = send
        self._clock = clock
        self._last_sent = float("-inf")
        self._trailing: threading.Timer | None = None
        self._lock = threading.Lock()

    def __call__(self, *args) -> None:
        with self._lock:
            if self._trailing is not None:
                self._args = args  # the armed send carries the newest batch
                return
            wait = self._last_sent + self.interval_s - self._clock()
            if wait > 0:
                self._args = args
                self._trailing = threading.Timer(wait, self._fire)
                self._trailing.daemon = True
                self._trailing.start()
                return
            self._last_sent = self._clock()
        self._send(*args)

    def _fire(self) -> None:
        with self._lock:
            self._trailing = None
            self._last_sent = self._clock()
            args = self._args
        try:
            self._send(*args)
        except Exception:
            log.exception("a debounced send failed; the beat sweep does its work")
