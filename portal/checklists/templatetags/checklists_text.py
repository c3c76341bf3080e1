"""Filters for the checklist pages: the shipped checklists' words and the automatic checks'
outcomes in the reader's language (stored values and the API stay as they are)."""

from django import template
from django.utils.translation import pgettext

from portal.checklists.evidence_text import evidence_text
from portal.checklists.shipped import shipped_option, shipped_text

register = template.Library()
register.filter("shipped", shipped_text)
register.filter("shipped_option", shipped_option)


@register.filter
def outcome_word(outcome: str) -> str:
    """An automatic item's outcome (pass, fail, unknown, pending) as the pages show it."""
    words = {
        "pass": pgettext("checklist outcome", "pass"),
        "fail": pgettext("checklist outcome", "fail"),
        "unknown": pgettext("checklist outcome", "unknown"),
        "pending": pgettext("checklist outcome", "pending"),
    }
    return words.get(outcome, outcome)


register.filter("evidence_text", evidence_text)
