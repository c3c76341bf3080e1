import datetime as dt
import re

from django import template
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter
def short_uuid(uuid):
    return uuid[4:12] if uuid.startswith("GPU-") else uuid[:8]


# Bookkeeping fields that every create shows and nobody needs to read.
_AUDIT_NOISE = {"id", "created_at", "updated_at"}


def _audit_value(value):
    # django-auditlog stores values as strings, "None" included.
    return "∅" if value in (None, "None", "") else value


@register.filter
def audit_changes(entry):
    """(field, old, new) rows of a log entry; a create shows only the values it set."""
    changes = entry.changes_dict or {}
    rows = []
    for field, change in changes.items():
        old, new = (change + [None, None])[:2] if isinstance(change, list) else (None, change)
        if entry.action == entry.Action.CREATE and (field in _AUDIT_NOISE or new in (None, "None", "")):
            continue
        rows.append((field, _audit_value(old), _audit_value(new)))
    return rows


@register.filter
def from_epoch(seconds):
    """A Unix timestamp (seconds, as evidence stores them) as an aware UTC datetime."""
    try:
        return dt.datetime.fromtimestamp(float(seconds), dt.UTC)
    except (TypeError, ValueError, OverflowError):
        return None


@register.filter
def code_spans(text):
    """Text with `backtick` spans shown as code: escaped first, so nothing in it becomes markup."""
    escaped = conditional_escape(text)
    return mark_safe(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))  # noqa: S308 (escaped above)
