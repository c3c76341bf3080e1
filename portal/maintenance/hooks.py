"""What a ticket change and a new notification set off (`portal.core.hooks.Hook`).

Maintenance sits below `live` and must not import it; the apps that react subscribe here in their
`AppConfig.ready()`:

- `ticket_changed`: a ticket was opened, reopened, escalated, resolved or moved by a person,
  called with `ticket`, `event` (the TicketEvent row) and `change` (the word a person reads:
  opened, reopened, escalated, resolved, acknowledged, …). `live` pushes it to the ticket feed,
  diagnostics and the scheduler act on it. Called inside the service's transaction; a consumer
  that sends anything defers it to the commit. Isolated: the change itself is saved whatever fails.
- `notifications_ready`: notification rows are due to go out, called with `ids`; the subscriber
  returns the ids it queued. Maintenance's own `enqueue.notifications_enqueue` is the one
  subscriber: the services that make notifications cannot import the tasks that send them (the
  tasks import the services), so the hand-over goes through here.

Policies (`portal.core.policies.Policy`, one owner each):

- `ticket_jobs`, provided by jobs: `ask(tickets=[...])` gives {ticket id: [job key, ...]}, the
  jobs on each ticket's GPU when it opened (the ticket API's `jobs`); none without the jobs app.
"""

from __future__ import annotations

import logging

from portal.core.hooks import Hook
from portal.core.policies import Policy

log = logging.getLogger(__name__)

ticket_changed = Hook("maintenance.ticket_changed", isolated=True)
notifications_ready = Hook("maintenance.notifications_ready")
ticket_jobs = Policy("maintenance.ticket_jobs", default=lambda *, tickets: {})


def notifications_hand_over(*, ids: list[int]) -> list[int]:
    """Hand notification rows to the sender; returns the ids queued (none without a sender: the
    rows stay pending for the sweep)."""
    if not notifications_ready:
        log.warning("no notification sender subscribed; %d notifications stay pending", len(ids))
        return []
    return [pk for queued in notifications_ready.call(ids=ids) for pk in queued]
