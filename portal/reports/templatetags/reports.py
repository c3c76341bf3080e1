"""Formatting only (no queries): hours, money, ratios, the MTBF interval, column titles, in the
active language's number format (grouping and decimal separator)."""

from django import template
from django.utils.formats import number_format
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from portal.fleet.selectors import GpuStatus
from portal.reports.baselines import CATEGORY_LABELS

register = template.Library()

COLUMNS = {
    "serial": _("Serial"), "hostname": _("Host / GPU"), "model": _("Model"), "service_hours": _("Service h"),
    "repairs": _("Repairs"), "downtime_hours": _("Downtime h"), "cost": _("Cost"), "mtbf_hours": _("MTBF h"),
    "mttr_hours": _("MTTR h"), "availability": _("Availability"), "hardware_tickets": _("HW tickets"),
}  # fmt: skip


def grouped(value, digits: int) -> str:
    """A number with `digits` decimals, grouped as the active language groups them."""
    return number_format(value, digits, force_grouping=True)


@register.filter
def hours(value):
    return "—" if value is None else grouped(value, 1)


@register.filter
def money(value):
    return "—" if value is None else grouped(value, 2)


@register.filter
def ratio(value):
    return "—" if value is None else f"{number_format(value * 100, 3)} %"


@register.filter
def pct0(value):
    return f"{number_format(value * 100, 0)} %"


@register.filter
def interval(row):
    low, high = row.get("mtbf_low"), row.get("mtbf_high")
    if low is None:
        return "—"
    return f"{grouped(low, 0)} – {'∞' if high is None else grouped(high, 0)}"


@register.filter
def column(key):
    return COLUMNS.get(key, key)


@register.filter
def gpu_status(value):
    """A GPU status value (an API enum value) as its label in the active language."""
    return GpuStatus(value).label if value in GpuStatus.values else value


@register.filter
def per_year(value):
    """A failure rate per GPU-year (three decimals)."""
    return "—" if value is None else grouped(value, 3)


@register.filter
def failure_category(key):
    """A failure category (an API enum value) as its label in the active language."""
    return gettext(CATEGORY_LABELS[key]) if key in CATEGORY_LABELS else gettext("All failures")


@register.filter
def pct(value):
    """A percentage already 0–100 (one decimal)."""
    return "—" if value is None else f"{grouped(value, 1)} %"


@register.filter
def kwh(value):
    return "—" if value is None else f"{grouped(value, 1)} kWh"


@register.filter
def kwh_rate(value):
    """kWh per GPU-hour (three decimals)."""
    return "—" if value is None else grouped(value, 3)
