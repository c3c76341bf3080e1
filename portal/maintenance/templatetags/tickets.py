"""Ticket values as people read them: a peak or an event's value with its unit or name, by the
ticket's rule ("50 days overdue", "silent for 25 min", "XID 79"), never a bare number."""

from django import template
from django.template.defaultfilters import floatformat

from portal.maintenance.rules import RULES
from portal.maintenance.xid_catalog import ticket_xid_codes

register = template.Library()


@register.filter
def peak_shown(ticket) -> str:
    """The ticket's peak in words; an XID ticket names its codes."""
    if ticket.rule.startswith("xid_"):
        return ", ".join(f"XID {code}" for code in ticket_xid_codes(ticket))
    return rule_value(ticket.peak_value, ticket.rule)


@register.filter
def rule_value(value, rule_key: str) -> str:
    """An event's value by the rule that gave it ("" where the rule shows none)."""
    if value is None:
        return ""
    rule = RULES.get(rule_key)
    if rule is None:  # a rule since removed: the number alone
        return floatformat(value, -1)
    return rule.value_shown(value)


@register.filter
def evidence_value(value, rule_key: str) -> str:
    """A reading that fired the ticket: an XID code as "XID 79", a measurement with its rule's unit."""
    if value is None:
        return "—"
    if rule_key.startswith("xid_"):
        return f"XID {value}"
    rule = RULES.get(rule_key)
    number = floatformat(value, -1)
    return f"{number} {rule.unit}".strip() if rule is not None and rule.unit not in ("", "s") else number
