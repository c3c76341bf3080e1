"""A line in the audit trail for what no model save records: a refused attempt, an account event.

django-auditlog writes a line for every create, update and delete of a registered model by
itself; a refusal writes nothing (its transaction rolled back, or it never started), so the code
that refuses calls `audit_line` once the refused work is undone, so that the line stays.
"""

from __future__ import annotations

from auditlog.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models


def audit_line(
    *, about: models.Model, changes: dict, action: int = LogEntry.Action.ACCESS, actor=None, client: str | None = None
) -> LogEntry:
    """One audit line on `about` (its page in the trail): `changes` as auditlog keeps them,
    {field: [before, after]}; `actor` a user (None or an unsaved one: nobody), `client` the
    address the attempt came from."""
    return LogEntry.objects.create(
        content_type=ContentType.objects.get_for_model(type(about)),
        object_pk=str(about.pk),
        object_id=about.pk if isinstance(about.pk, int) else None,
        object_repr=str(about),
        action=action,
        changes=changes,
        actor=actor if getattr(actor, "pk", None) else None,
        remote_addr=client,
    )
