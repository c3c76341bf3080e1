"""The one module that sends the maintenance tasks (services never do: the tasks import them).

Notifications: `notifications_enqueue`, the sender registered with portal.maintenance.hooks.

Evaluation, from the ingest path, at most a few times a second per process.

An evaluation task runs a pass over every batch not yet evaluated (services.evaluate), so one
task per batch is wasted work under load: each costs the broker a message and the ingest request
the time to send it. Within EVALUATE_DEBOUNCE_S of the last send, a batch only arms one trailing
send; the pass it triggers picks up every batch stored meanwhile. The beat sweep catches
anything a failed send left behind.
"""

import logging
import threading
import time

from django.conf import settings

from portal.maintenance.tasks import batch_evaluate_task, notification_send_task

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
            log.exception("sending the evaluation task failed; the beat sweep will evaluate the batch")


def _send_evaluation(batch_pk: int, gpu_ids: list[int]) -> None:
    batch_evaluate_task.delay(batch_pk, gpu_ids)


_debouncer: Debouncer | None = None


def evaluation_enqueue(*, batch_pk: int, gpu_ids: list[int]) -> None:
    global _debouncer
    interval = settings.MAINTENANCE_EVALUATE_DEBOUNCE_S
    if interval <= 0:
        _send_evaluation(batch_pk, gpu_ids)
        return
    if _debouncer is None or _debouncer.interval_s != interval:
        _debouncer = Debouncer(interval, _send_evaluation)
    _debouncer(batch_pk, gpu_ids)


def notifications_enqueue(*, ids: list[int]) -> list[int]:
    """Hand notifications to the workers. With the broker down the rows stay pending and
    `notifications_pending_sweep` sends them later. Returns the ids that were queued."""
    queued = []
    for pk in ids:
        try:
            notification_send_task.delay(pk)
        except Exception:
            log.exception("could not enqueue notification %s; the send sweep will pick it up", pk)
        else:
            queued.append(pk)
    return queued
