"""What telemetry hands on and asks of the apps above it (`portal.core.hooks.Hook`), subscribed
in their `AppConfig.ready()`:

- `batch_stored`: a stored batch, handed on after the ingest transaction commits, as `batch_pk`,
  `host_id`, `gpu_ids` and `readings` (the batch's stored rows as tuples in
  `telemetry.columns.READING_ROW_COLUMNS` order, still in memory, so an in-process consumer needs
  no query). The pipeline (telemetry's own trigger) and `live` subscribe. The readings are safe by
  then, so a failing consumer (Redis down, broker down) is logged and never turns the agent's 202
  into an error: the agent would only send the same batch again.
- `pipeline_stages`: the stages of the one pipeline after ingest (`portal.telemetry.pipeline`), each
  a `prepare(block)` subscribed with its `order`: rules (maintenance), rollups (telemetry), wear.
- `host_commands`: work the portal asks of a host's agent, carried by the answer to its batches
  (ingest-v1.md, "Commands"): `provider(host_id=...)` returns what is pending for the host
  (diagnostics). Asked only while the host's `commands_queued_at` is set
  (fleet.services.host_commands_queued), so the usual batch costs nothing; one that fails is logged
  and the answer goes out without its commands.
"""

import logging

from portal.core.hooks import Hook

log = logging.getLogger(__name__)

batch_stored = Hook("telemetry.batch_stored", isolated=True)
pipeline_stages = Hook("telemetry.pipeline_stages")
host_commands = Hook("telemetry.host_commands")


def host_commands_for(*, host_id: int) -> list[dict] | None:
    """Every provider's commands for the host; None when a provider failed (nothing is known)."""
    commands: list[dict] = []
    for provider in host_commands:
        try:
            commands.extend(provider.function(host_id=host_id))
        except Exception:
            log.exception(
                "command provider %s failed for host %s; answering without its commands", provider.name, host_id
            )
            return None
    return commands
