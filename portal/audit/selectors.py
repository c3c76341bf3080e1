"""Read the audit trail (kept by django-auditlog: one LogEntry per create, update or delete,
with the changed fields from → to; entries outlive the objects they describe)."""

import datetime as dt

from auditlog.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import QuerySet

from portal.core.selectors import filter_given

# The audited models, by the short name the log's filter uses.
AUDITED_MODELS = {
    "host": ("fleet", "host"),
    "gpu": ("fleet", "gpu"),
    "refused status": ("fleet", "gpustatusrefusal"),
    "record": ("fleet", "maintenancerecord"),
    "attachment": ("fleet", "attachment"),
    "scheduler": ("scheduler", "scheduleraction"),
    "enrolment code": ("enrolment", "enrolmentcode"),
    "enrolment": ("enrolment", "enrolmentattempt"),
    "account": ("accounts", "accountevent"),
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
    if actor == "-":  # entries no one is named in (commands, migrations)
        entries, actor = entries.filter(actor__isnull=True), ""
    return filter_given(
        entries,
        content_type=ContentType.objects.get_by_natural_key(*AUDITED_MODELS[model]) if model else None,
        action=ACTIONS[action] if action else None,
        actor__username=actor,
        object_repr__icontains=query,
        timestamp__date__gte=since,
        timestamp__date__lte=until,
    )
