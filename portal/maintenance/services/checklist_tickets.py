"""Tickets opened by checklist runs (rule `checklist_failed`): one per subject while open, each
failed item an event on it naming the item, with the run's link."""

from __future__ import annotations

import datetime as dt

from portal.maintenance import messages
from portal.maintenance.models import Ticket
from portal.maintenance.services.tickets import ticket_fire

RULE = "checklist_failed"


def ticket_checklist_item_failed(
    *,
    host_id: int,
    gpu_id: int | None,
    at: dt.datetime,
    item_label: str,
    run_id: int,
    template_name: str,
    run_url: str,
) -> tuple[Ticket, str]:
    """Open (or bump) the subject's `checklist_failed` ticket for one failed item. The ticket's
    title names the first failed item; every event's note names its own."""
    note = messages.CHECKLIST_FAILED(item=item_label, run=run_id, template=template_name, url=run_url)
    # The evidence (readings, answers) stays on the run's page; the ticket links it.
    ticket, what = ticket_fire(rule=RULE, host_id=host_id, gpu_id=gpu_id, at=at, note=note)
    if what in ("opened", "reopened"):
        gpu_index = ticket.gpu.index if ticket.gpu_id else None
        subject = messages.subject(host=ticket.host.hostname, gpu_index=gpu_index)
        title = messages.CHECKLIST_TITLE(item=item_label, subject=subject)
        action = messages.ACTION_WITH_NOTE(action=RULE, note=note)
        Ticket.objects.filter(pk=ticket.pk).update(
            title=str(title)[:200], title_msg=title.stored(), action=str(action), action_msg=action.stored()
        )
        ticket.title, ticket.title_msg = str(title)[:200], title.stored()
        ticket.action, ticket.action_msg = str(action), action.stored()
    return ticket, what
