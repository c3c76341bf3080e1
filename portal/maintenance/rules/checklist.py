"""A checklist item failed: opened by the checklists app when a run completes (or when an
automatic item's pending verification ends) with a pass/fail or automatic item failed."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from .base import Rule


class ChecklistFailed(Rule):
    __doc__ = gettext_noop(
        'A checklist run found a problem: a pass/fail item answered "fail", or an automatic item (idle '
        "temperature, ECC, fans, backup, cooling after a cleaning) that failed. The ticket names the item "
        "and links the run; whoever fixes it resolves the ticket by hand."
    )

    key = "checklist_failed"
    value_text = ""  # the note names what failed
    title = gettext_noop("Checklist item failed")
    watches = gettext_noop("checklist runs")
    scope = "checklist"  # opened by the checklists app, never by the rule engine
    severity = "warning"
    action = gettext_noop(
        "Open the checklist run named below, read the failed item and its evidence, fix the cause, then run the "
        "checklist again (or resolve this ticket with a note)."
    )


CHECKLIST_FAILED = ChecklistFailed()
