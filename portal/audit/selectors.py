"""Read the audit trail (kept by django-auditlog: one LogEntry per create, update or delete,
with the changed fields from → to; entries outlive the objects they describe)."""

import datetime as dt

from auditlog.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import QuerySet

# The audited models, by the short name the log's filter uses.
AUDITED_MODELS = {
    "host": ("fleet", "host"),
    "gpu": ("fleet", "gpu"),
    "record": ("fleet", "maintenancerecord"),
    "attachment": ("fleet", "attachment"),
}

ACTIONS = {
    "create": LogEntry.Action.CREATE,
    "update": LogEntry.Action.UPDATE,
    "delete": LogEntry.Action.DELETE,
}


def audit_log(
    *,
    model: str = "",
    action: str = "",
    actor: str = "",
    query: str = "",
    since: dt.date | None = None,
    until: dt.date | None = None,
) -> QuerySet[LogEntry]:
    entries = LogEntry.objects.select_related("actor", "content_type").order_by("-timestamp", "-id")
    if model:
        app_label, model_name = AUDITED_MODELS[model]
        entries = entries.filter(content_type=ContentType.objects.get_by_natural_key(app_label, model_name))
    if action:
        entries = entries.filter(action=ACTIONS[action])
    if actor == "-":
        entries = entries.filter(actor__isnull=True)
    elif actor:
        entries = entries.filter(actor__username=actor)
    if query:
        entries = entries.filter(object_repr__icontains=query)
    if since:
        entries = entries.filter(timestamp__date__gte=since)
    if until:
        entries = entries.filter(timestamp__date__lte=until)
    return entries
