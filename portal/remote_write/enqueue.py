"""What the write sends when ingest refused readings it completed (they stay pending): a hand-on
pass soon, at most once per PIPELINE_DEBOUNCE_S per process (a pass takes every GPU's complete
readings, and settles a refused GPU's on their own). Not after every write: the readings a write
completes are handed on by the write itself, and a pass after each one read every pending row
to find nothing (a quarter of the worker's CPU under a steady stream of writes). Beat's
`remote-write-hand-on` runs the same pass for readings that complete by waiting."""

import logging

from django.conf import settings

from portal.core.debounce import Debouncer
from portal.remote_write.tasks import remote_readings_hand_on_task

log = logging.getLogger(__name__)

_debouncer: Debouncer | None = None


def _send() -> None:
    try:
        remote_readings_hand_on_task.delay()
    except Exception:  # the samples are stored; beat's pass hands them on
        log.exception("remote write: could not send the hand-on task")


def hand_on_soon() -> None:
    global _debouncer
    interval = settings.PIPELINE_DEBOUNCE_S
    if interval <= 0:
        _send()
        return
    if _debouncer is None or _debouncer.interval_s != interval:
        _debouncer = Debouncer(interval, _send)
    _debouncer()
