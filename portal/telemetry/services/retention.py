"""Prune old telemetry in bounded chunks, so the job never holds a long lock or a huge transaction."""

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.telemetry.models import IngestBatch, Reading, Rollup1m, XidEvent

CHUNK = 10_000


def _prune(queryset, time_field: str, before: dt.datetime, *, chunk: int, max_chunks: int) -> int:
    deleted = 0
    for _ in range(max_chunks):
        ids = list(queryset.filter(**{f"{time_field}__lt": before}).values_list("pk", flat=True)[:chunk])
        if not ids:
            break
        with transaction.atomic():
            deleted += queryset.model.objects.filter(pk__in=ids).delete()[0]
    return deleted


def telemetry_prune(*, now: dt.datetime | None = None, chunk: int = CHUNK, max_chunks: int = 100) -> dict[str, int]:
    """Delete raw readings, XID events and batch rows past RETENTION_RAW_DAYS and 1-minute
    rollups past RETENTION_1M_DAYS. 1-hour rollups are kept. Returns what it deleted."""
    now = now or timezone.now()
    raw_before = now - dt.timedelta(days=settings.RETENTION_RAW_DAYS)
    minute_before = now - dt.timedelta(days=settings.RETENTION_1M_DAYS)
    bounds = {"chunk": chunk, "max_chunks": max_chunks}
    return {
        "readings": _prune(Reading.objects.all(), "ts", raw_before, **bounds),
        "xid_events": _prune(XidEvent.objects.all(), "ts", raw_before, **bounds),
        # Batch rows are the idempotency keys; agents never resend anything this old (readings
        # older than 24 h are refused anyway), and rolled-up ones are no longer work.
        "batches": _prune(IngestBatch.objects.filter(rolled_up=True), "received_at", raw_before, **bounds),
        "rollups_1m": _prune(Rollup1m.objects.all(), "bucket", minute_before, **bounds),
    }
