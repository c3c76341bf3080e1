"""Hand stored batches to the wear task: at most one send per WEAR_DEBOUNCE_S per process, with the
range of readings per GPU merged meanwhile (a late stretch must not be lost in the merge). The beat
sweep (`wear_sweep`) catches readings whose send failed."""

import logging
import threading

from django.conf import settings

from portal.telemetry.columns import ROW_GPU_ID, ROW_TS
from portal.wear.tasks import wear_update_task

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pending: dict[int, list[float]] = {}
_timer: threading.Timer | None = None


def _ranges(readings) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for row in readings:
        ts, gpu_id = row[ROW_TS].timestamp(), row[ROW_GPU_ID]
        span = out.get(gpu_id)
        if span is None:
            out[gpu_id] = [ts, ts]
        elif ts < span[0]:
            span[0] = ts
        elif ts > span[1]:
            span[1] = ts
    return out


def _merge(into: dict[int, list[float]], ranges: dict[int, list[float]]) -> None:
    for gpu_id, (lo, hi) in ranges.items():
        span = into.get(gpu_id)
        if span is None:
            into[gpu_id] = [lo, hi]
        else:
            span[0], span[1] = min(span[0], lo), max(span[1], hi)


def _flush() -> None:
    global _timer
    with _lock:
        ranges, _timer = dict(_pending), None
        _pending.clear()
    if not ranges:
        return
    try:
        wear_update_task.delay({str(k): v for k, v in ranges.items()})
    except Exception:
        log.exception("sending the wear task failed; the wear sweep will count the readings")


def wear_batch_stored(*, batch_pk: int, host_id: int, gpu_ids: list[int], readings=()) -> None:
    global _timer
    if not settings.WEAR_ON_INGEST:
        return
    ranges = _ranges(readings)
    if not ranges:
        return
    interval = settings.WEAR_DEBOUNCE_S
    if interval <= 0:
        wear_update_task.delay({str(k): v for k, v in ranges.items()})
        return
    with _lock:
        _merge(_pending, ranges)
        if _timer is None:
            _timer = threading.Timer(interval, _flush)
            _timer.daemon = True
            _timer.start()
