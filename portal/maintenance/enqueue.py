"""The one module that sends the maintenance tasks (services never do: the tasks import them).

Notifications: `notifications_enqueue`, the sender subscribed to portal.maintenance.hooks.notifications_ready.
(Evaluation is a stage of the pipeline: portal.telemetry.pipeline.)
"""

import logging

from portal.maintenance.tasks import notification_send_task

log = logging.getLogger(__name__)


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
