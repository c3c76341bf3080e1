"""What guidance adds to a ticket's page and a checklist run's page (portal.core.panels): a link
to the practice its rule or checklist belongs to (a dictionary lookup, no query)."""

from portal.core.panels import panel
from portal.guidance.practices import practice_for_checklist, practice_for_rule


@panel("maintenance.ticket", slot="guidance", name="guidance", template="guidance/link.html")
def ticket_practice(*, ticket, **page) -> dict | None:
    practice = practice_for_rule(ticket.rule)
    return {"practice": practice} if practice else None


@panel("checklists.run", slot="guidance", name="guidance", template="guidance/link.html")
def run_practice(*, run, **page) -> dict | None:
    practice = practice_for_checklist(run.template.key)
    return {"practice": practice} if practice else None
