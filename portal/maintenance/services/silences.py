"""Maintenance windows (silences), audited through django-auditlog."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.utils import timezone

from portal.core.errors import InvalidInput
from portal.maintenance.models import Silence

if TYPE_CHECKING:  # types in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu, Host


def silence_create(
    *, host: Host, ends_at: dt.datetime, comment: str, user=None, gpu: Gpu | None = None, starts_at=None
) -> Silence:
    starts_at = starts_at or timezone.now()
    errors = {}
    if ends_at <= starts_at:
        errors["ends_at"] = ["must be after the start"]
    if ends_at - starts_at > dt.timedelta(days=90):
        errors["ends_at"] = ["at most 90 days"]
    if not (comment or "").strip():
        errors["comment"] = ["say why (it is kept in the audit log)"]
    if gpu is not None and gpu.host_id != host.pk:
        errors["gpu"] = ["this GPU is not in that host"]
    if errors:
        raise InvalidInput("invalid silence", field_errors=errors)
    return Silence.objects.create(
        host=host, gpu=gpu, starts_at=starts_at, ends_at=ends_at, comment=comment.strip(), created_by=user
    )


def silence_end_set(*, silence: Silence, ends_at: dt.datetime) -> Silence:
    """Move a silence's end: ended early (a maintenance window completed) or held longer (one that
    runs over its planned end). Audited like its creation."""
    silence.ends_at = max(ends_at, silence.starts_at)
    silence.save(update_fields=["ends_at"])
    return silence
