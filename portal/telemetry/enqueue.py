"""The one trigger of the pipeline: a stored batch sends the pipeline task, at most once per
PIPELINE_DEBOUNCE_S per process (a run takes every pending batch, so one task per batch would be
wasted work under load), with one trailing send for batches stored meanwhile. Beat's sweep runs
whatever a failed send left behind."""

import logging

from django.conf import settings

from portal.core.debounce import Debouncer
from portal.telemetry.tasks import pipeline_run_task

log = logging.getLogger(__name__)

_debouncer: Debouncer | None = None


def _send() -> None:
    pipeline_run_task.delay()


def pipeline_batch_stored(*, batch_pk: int, host_id: int, gpu_ids: list[int], readings=()) -> None:
    """The batch_stored hook: a pass soon (it reads the readings itself, with its other batches)."""
    global _debouncer
    interval = settings.PIPELINE_DEBOUNCE_S
    if interval <= 0:
        _send()
        return
    if _debouncer is None or _debouncer.interval_s != interval:
        _debouncer = Debouncer(interval, _send)
    _debouncer()
