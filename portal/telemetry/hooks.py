"""The one place a stored batch is handed on (live updates, anomaly evaluation, rollups).

Called after the ingest transaction commits. The readings are already safe by then, so a
failing consumer (Redis down, broker down) is logged and never turns the agent's 202 into an
error: the agent would only send the same batch again.
"""

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

BatchConsumer = Callable[..., None]
_consumers: list[tuple[str, BatchConsumer, bool]] = []


def on_batch_stored(name: str, *, with_readings: bool = False) -> Callable[[BatchConsumer], BatchConsumer]:
    """Register a consumer: it is called with batch_pk, host_id and gpu_ids keyword arguments,
    and with `readings` too when with_readings is set: the batch's stored rows as tuples in
    `telemetry.models.READING_ROW_COLUMNS` order, still in memory, so an in-process consumer
    needs no query."""

    def register(consumer: BatchConsumer) -> BatchConsumer:
        _consumers[:] = [entry for entry in _consumers if entry[0] != name]
        _consumers.append((name, consumer, with_readings))
        return consumer

    return register


def batch_stored(*, batch_pk: int, host_id: int, gpu_ids: list[int], readings: list[tuple] = ()) -> None:
    for name, consumer, with_readings in list(_consumers):
        extra = {"readings": readings} if with_readings else {}
        try:
            consumer(batch_pk=batch_pk, host_id=host_id, gpu_ids=gpu_ids, **extra)
        except Exception:
            log.exception("batch consumer %s failed for batch %s; the batch itself is stored", name, batch_pk)
