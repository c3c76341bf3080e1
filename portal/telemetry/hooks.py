"""The one place a stored batch is handed on (live updates, anomaly evaluation, rollups), and
where apps that read raw readings after they are stored say which they still need.

Called after the ingest transaction commits. The readings are already safe by then, so a
failing consumer (Redis down, broker down) is logged and never turns the agent's 202 into an
error: the agent would only send the same batch again.
"""

import datetime as dt
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

BatchConsumer = Callable[..., None]
_consumers: list[tuple[str, BatchConsumer, bool]] = []


def on_batch_stored(name: str, *, with_readings: bool = False) -> Callable[[BatchConsumer], BatchConsumer]:
    """Register a consumer: it is called with batch_pk, host_id and gpu_ids keyword arguments,
    and with `readings` too when with_readings is set: the batch's stored rows as tuples in
    `telemetry.columns.READING_ROW_COLUMNS` order, still in memory, so an in-process consumer
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


# Apps above telemetry that read raw readings after they are stored (the wear meters): each says
# the oldest moment it still needs, or None; retention keeps raw readings from there on.
_raw_needed: dict[str, Callable[[], dt.datetime | None]] = {}


def raw_readings_needed(name: str) -> Callable[[Callable], Callable]:
    def register(oldest_needed: Callable[[], dt.datetime | None]) -> Callable:
        _raw_needed[name] = oldest_needed
        return oldest_needed

    return register


def oldest_raw_needed() -> dt.datetime | None:
    """The oldest moment any registered consumer still needs raw readings from, or None."""
    needed = [moment for oldest in _raw_needed.values() if (moment := oldest()) is not None]
    return min(needed, default=None)


# Work the portal asks of a host's agent, carried by the answer to its batches (ingest-v1.md,
# "Commands"): apps above telemetry (diagnostics) say what is pending for a host. Asked only while
# the host's `commands_queued_at` is set (fleet.services.host_commands_queued), so the usual batch
# costs nothing; one that fails is logged and the answer goes out without its commands.
CommandProvider = Callable[..., list[dict]]
_command_providers: list[tuple[str, CommandProvider]] = []


def on_host_commands(name: str) -> Callable[[CommandProvider], CommandProvider]:
    def register(provider: CommandProvider) -> CommandProvider:
        _command_providers[:] = [entry for entry in _command_providers if entry[0] != name]
        _command_providers.append((name, provider))
        return provider

    return register


def host_commands(*, host_id: int) -> list[dict] | None:
    """Every provider's commands for the host; None when a provider failed (nothing is known)."""
    commands: list[dict] = []
    for name, provider in list(_command_providers):
        try:
            commands.extend(provider(host_id=host_id))
        except Exception:
            log.exception("command provider %s failed for host %s; answering without its commands", name, host_id)
            return None
    return commands
