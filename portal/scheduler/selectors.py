"""Read the scheduler's view of a host: its node as Slurm says now, and the portal's actions."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from django.core.cache import cache

from portal.core.errors import NotFound
from portal.fleet import selectors as fleet_selectors
from portal.scheduler.adapters import SchedulerAdapter
from portal.scheduler.models import SchedulerAction
from portal.scheduler.services import (
    NODE_STATUS_CACHE_S,
    node_name,
    node_status_cache_key,
    scheduler_adapter,
    scheduler_enabled,
)

if TYPE_CHECKING:
    from portal.fleet.models import Host


def scheduler_host_get(*, hostname: str) -> Host:
    """The host whose node the scheduler endpoints talk about; NotFound when Slurm is off."""
    if not scheduler_enabled():
        raise NotFound("Slurm is not enabled on this portal (SLURM_MODE)")
    host = fleet_selectors.hosts().filter(hostname=hostname).first()
    if host is None:
        raise NotFound(f"no host {hostname!r}", problems=[("hostname", f"no host {hostname!r}")])
    return host


def scheduler_node_status(*, host: Host, adapter: SchedulerAdapter | None = None, fresh: bool = False) -> dict:
    """`{"node", "state", "reason", "jobs"}` as Slurm said it at most NODE_STATUS_CACHE_S ago
    (NodeUnknown, SchedulerUnavailable): pages and API reads of one node share one `sinfo` and one
    `squeue` (or two slurmrestd requests) per window, however often they are asked. `fresh`: ask
    Slurm now (after this process drained or resumed the node, which also forgets the old answer).
    Only answers are kept; a failure is asked again next time."""
    name = node_name(host)
    key = node_status_cache_key(name)
    if not fresh:
        status = cache.get(key)
        if status is not None:
            return status
    adapter = adapter or scheduler_adapter()
    node = adapter.node(name)
    status = {
        "node": node.node,
        "state": node.state,
        "reason": node.reason,
        "jobs": [dataclasses.asdict(job) for job in adapter.jobs(name)],
    }
    cache.set(key, status, NODE_STATUS_CACHE_S)
    return status


def scheduler_host_actions(*, host: Host, limit: int = 10) -> list[SchedulerAction]:
    return list(
        SchedulerAction.objects.filter(host=host)
        .select_related("ticket", "requested_by")
        .order_by("-created_at", "-id")[:limit]
    )


def scheduler_last_failure(*, host: Host) -> SchedulerAction | None:
    """The latest action that Slurm refused or did not answer (and that is not done since)."""
    return (
        SchedulerAction.objects.filter(
            host=host, state__in=[SchedulerAction.State.PENDING, SchedulerAction.State.FAILED]
        )
        .exclude(last_error="")
        .order_by("-last_attempt_at", "-id")
        .first()
    )
