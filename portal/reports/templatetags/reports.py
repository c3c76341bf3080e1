"""Formatting only (no queries): hours, money, ratios, the MTBF interval, column titles."""

from django import template

register = template.Library()

COLUMNS = {
    "serial": "Serial", "hostname": "Host / GPU", "model": "Model", "service_hours": "Service h",
    "repairs": "Repairs", "downtime_hours": "Downtime h", "cost": "Cost", "mtbf_hours": "MTBF h",
    "mttr_hours": "MTTR h", "availability": "Availability", "hardware_tickets": "HW tickets",
}  # fmt: skip


@register.filter
def hours(value):
    return "—" if value is None else f"{value:,.1f}"


@register.filter
def money(value):
    return "—" if value is None else f"{value:,.2f}"


@register.filter
def ratio(value):
    return "—" if value is None else f"{value * 100:.3f} %"


@register.filter
def pct0(value):
    return f"{value * 100:.0f} %"


@register.filter
def interval(row):
    low, high = row.get("mtbf_low"), row.get("mtbf_high")
    if low is None:
        return "—"
    return f"{low:,.0f} – {'∞' if high is None else f'{high:,.0f}'}"


@register.filter
def column(key):
    return COLUMNS.get(key, key)
