"""`{% practice_for rule=… checklist=… as practice %}`: the practice a rule key or a checklist
template key belongs to (a dictionary lookup, no query)."""

from django import template

from portal.guidance.practices import practice_for_checklist, practice_for_rule

register = template.Library()


@register.simple_tag
def practice_for(rule="", checklist=""):
    return (practice_for_rule(rule) if rule else None) or (practice_for_checklist(checklist) if checklist else None)
