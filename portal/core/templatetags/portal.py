import datetime as dt

from django import template

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
