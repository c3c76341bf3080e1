import datetime as dt
import re

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince
from django.utils.translation import gettext

from portal.core.audit_display import changes_shown

register = template.Library()


@register.filter
def short_uuid(uuid):
    return uuid[4:12] if uuid.startswith("GPU-") else uuid[:8]


@register.filter
def audit_changes(entry):
    """(field, old, new) rows of a log entry in words (portal.core.audit_display): as the view
    prepared them (related objects by name), else without looking anything up (a related object by
    its id: a template tag runs no queries)."""
    prepared = getattr(entry, "changes_shown", None)
    return prepared if prepared is not None else changes_shown(entry)


@register.simple_tag
def zoned(label: str) -> str:
    """A time column's header naming the zone its times are shown in (the active one: `date` shows
    them there), "When (Asia/Shanghai)", never a fixed "(UTC)" that is wrong elsewhere."""
    return gettext("%(label)s (%(zone)s)") % {"label": label, "zone": timezone.get_current_timezone_name()}


@register.filter
def ago(moment, now=None):
    """How long ago `moment` was, in words: "3 hours, 5 minutes ago", or "just now" under a minute
    (Django's timesince says "0 minutes" there, which reads like a fault)."""
    if moment is None:
        return ""
    now = now or timezone.now()
    if (now - moment).total_seconds() < 60:
        return gettext("just now")
    return gettext("%(since)s ago") % {"since": timesince(moment, now)}


@register.filter
def from_epoch(seconds):
    """A Unix timestamp (seconds, as evidence stores them) as an aware UTC datetime."""
    try:
        return dt.datetime.fromtimestamp(float(seconds), dt.UTC)
    except (TypeError, ValueError, OverflowError):
        return None


_RFC3339 = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")


def _shown_time(match: re.Match) -> str:
    try:
        moment = dt.datetime.fromisoformat(match.group(0).replace("Z", "+00:00"))
    except ValueError:
        return match.group(0)
    return date_format(timezone.localtime(moment), "Y-m-d H:i:s")


@register.filter
def local_times(text):
    """A tool's output with its RFC 3339 times ("2026-12-02T10:00:05.120Z", as the agent writes
    them, agents/collector.py) in the portal's format and the reader's zone: only the times change,
    the rest is the tool's own words (and is escaped by the template as usual)."""
    return _RFC3339.sub(_shown_time, text) if text else text


@register.filter
def code_spans(text):
    """Text with `backtick` spans shown as code: escaped first, so nothing in it becomes markup."""
    escaped = conditional_escape(text)
    return mark_safe(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))  # noqa: S308 (escaped above)
