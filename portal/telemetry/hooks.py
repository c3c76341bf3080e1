"""The one place a stored batch is handed on (live updates, anomaly evaluation, rollups).

Called after the ingest transaction commits. The readings are already safe by then, so a
failing consumer (Redis down, broker down) is logged and never turns the agent's 202 into an
error: the agent would only send the same batch again.
"""

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

BatchConsumer = Callable[..., None]
_consumers: list[tuple[str, BatchConsumer]] = []


def on_batch_stored(name: str) -> Callable[[BatchConsumer], BatchConsumer]:
    """Register a consumer: it is called with batch_pk, host_id and gpu_ids keyword arguments."""

    def register(consumer: BatchConsumer) -> BatchConsumer:
        _consumers[:] = [(n, c) for n, c in _consumers if n != name]
        _consumers.append((name, consumer))
        return consumer

    return register


def batch_stored(*, batch_pk: int, host_id: int, gpu_ids: list[int]) -> None:
    for name, consumer in list(_consumers):
        try:
            consumer(batch_pk=batch_pk, host_id=host_id, gpu_ids=gpu_ids)
        except Exception:
            log.exception("batch consumer %s failed for batch %s; the batch itself is stored", name, batch_pk)
