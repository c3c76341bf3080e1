"""What a ticket change and a new notification set off, in one place.

Maintenance sits below `live` and must not import it; the apps that react subscribe here in their
`AppConfig.ready()` (as with `portal.telemetry.hooks` for stored batches):

- `on_ticket_changed`: a ticket was opened, reopened, escalated, resolved or moved by a person
  (`live` pushes it to the ticket feed). Called inside the service's transaction; a consumer that
  sends anything defers it to the commit.
- `notifications_ready`: notification rows are due to go out (`portal.maintenance.enqueue` hands
  them to the workers; the services never send tasks themselves).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

TicketConsumer = Callable[..., None]
_ticket_consumers: list[tuple[str, TicketConsumer]] = []
_notification_sender: Callable[..., list[int]] | None = None


def on_ticket_changed(name: str) -> Callable[[TicketConsumer], TicketConsumer]:
    """Register a consumer, called with `ticket`, `event` (the TicketEvent row) and `change` (the
    word a person reads: opened, reopened, escalated, resolved, acknowledged, …)."""

    def register(consumer: TicketConsumer) -> TicketConsumer:
        _ticket_consumers[:] = [entry for entry in _ticket_consumers if entry[0] != name]
        _ticket_consumers.append((name, consumer))
        return consumer

    return register


def ticket_changed(*, ticket, event, change: str) -> None:
    for name, consumer in list(_ticket_consumers):
        try:
            consumer(ticket=ticket, event=event, change=change)
        except Exception:
            log.exception("ticket consumer %s failed for ticket %s; the change itself is saved", name, ticket.pk)


def on_notifications_ready(sender: Callable[..., list[int]]) -> Callable[..., list[int]]:
    """Register the one sender of notifications: called with `ids`, returns the ids it queued."""
    global _notification_sender
    _notification_sender = sender
    return sender


def notifications_ready(*, ids: list[int]) -> list[int]:
    """Hand notification rows to the sender; returns the ids queued (none without a sender: the
    rows stay pending for the sweep)."""
    if _notification_sender is None:
        log.warning("no notification sender registered; %d notifications stay pending", len(ids))
        return []
    return _notification_sender(ids=ids)
