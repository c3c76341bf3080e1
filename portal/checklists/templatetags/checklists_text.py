"""Filters for the checklist pages: the shipped checklists' words and the automatic checks'
outcomes in the reader's language (stored values and the API stay as they are)."""

from django import template

from portal.checklists.messages import outcome_word
from portal.checklists.shipped import shipped_option, shipped_text

register = template.Library()
register.filter("shipped", shipped_text)
register.filter("shipped_option", shipped_option)
register.filter("outcome_word", outcome_word)
