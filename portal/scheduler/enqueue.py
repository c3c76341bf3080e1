"""The one module of the scheduler app that sends tasks (services never do): a host's actions go
to a worker once the transaction that wrote them commits."""

from __future__ import annotations

import logging

from django.db import transaction

from portal.scheduler import services
from portal.scheduler.tasks import scheduler_host_actions_task

log = logging.getLogger(__name__)


def host_actions_enqueue(host_id: int) -> None:
    """After the commit; a broker that is down leaves the actions pending for the beat sweep."""

    def send():
        try:
            scheduler_host_actions_task.delay(host_id)
        except Exception:  # noqa: BLE001 - the sweep runs them
            log.warning("could not queue Slurm actions of host %s; the sweep will", host_id, exc_info=True)

    transaction.on_commit(send)


def ticket_changed(*, ticket, event, change: str) -> None:
    """The maintenance ticket hook (subscribed in SchedulerConfig.ready)."""
    if services.scheduler_ticket_changed(ticket=ticket, change=change):
        host_actions_enqueue(ticket.host_id)


def diagnostic_finished(*, diagnostic) -> None:
    """The diagnostics hook (subscribed in SchedulerConfig.ready): a pass may resume a node."""
    if services.scheduler_diagnostic_finished(diagnostic=diagnostic):
        host_actions_enqueue(diagnostic.host_id)


def burn_in_requested(*, diagnostic) -> None:
    """The diagnostics hook (subscribed in SchedulerConfig.ready): new GPUs keep the node drained."""
    if services.scheduler_burn_in_requested(diagnostic=diagnostic):
        host_actions_enqueue(diagnostic.host_id)
