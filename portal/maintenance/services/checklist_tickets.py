"""Tickets opened by checklist runs (rule `checklist_failed`): one per subject while open, each
failed item an event on it naming the item, with the run's link."""

from __future__ import annotations

import datetime as dt

from portal.maintenance.models import Ticket
from portal.maintenance.services.tickets import ticket_fire

RULE = "checklist_failed"


def ticket_checklist_item_failed(
    *, host_id: int, gpu_id: int | None, at: dt.datetime, item_label: str, run_label: str, run_url: str
) -> tuple[Ticket, str]:
    """Open (or bump) the subject's `checklist_failed` ticket for one failed item. The ticket's
    title names the first failed item; every event's note names its own."""
    note = f"{item_label} failed in {run_label} ({run_url})"
    # The evidence (readings, answers) stays on the run's page; the ticket links it.
    ticket, what = ticket_fire(rule=RULE, host_id=host_id, gpu_id=gpu_id, at=at, note=note[:1000])
    if what in ("opened", "reopened"):
        title = f"{item_label} failed: {ticket.title.split(': ', 1)[-1]}"[:200]
        Ticket.objects.filter(pk=ticket.pk).update(title=title, action=f"{ticket.action}\n\n{note}")
        ticket.title = title
    return ticket, what
