"""Prune old telemetry in bounded chunks, so the job never holds a long lock or a huge transaction."""

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.telemetry import hooks
from portal.telemetry.models import Reading, Rollup1m, XidEvent
from portal.telemetry.pipeline import finished_batches

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


def raw_cutoff(now: dt.datetime) -> dt.datetime:
    """Raw readings before this may go: past RETENTION_RAW_DAYS, but never any the rollups have
    not covered yet, nor any of an hour a late reading may still come in for (rollups recompute
    whole minutes and hours from raw readings, and ingest accepts readings up to
    INGEST_MAX_AGE_HOURS old), nor any a consumer registered with hooks.raw_readings_needed still
    needs (the pipeline: the readings of a batch some stage has not finished)."""
    cutoff = now - dt.timedelta(days=settings.RETENTION_RAW_DAYS)
    cutoff = min(cutoff, now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS))
    needed = hooks.oldest_raw_needed()
    if needed is not None:
        cutoff = min(cutoff, needed)
    return cutoff.replace(minute=0, second=0, microsecond=0)


def telemetry_prune(*, now: dt.datetime | None = None, chunk: int = CHUNK, max_chunks: int = 100) -> dict[str, int]:
    """Delete raw readings, XID events and batch rows past RETENTION_RAW_DAYS and 1-minute
    rollups past RETENTION_1M_DAYS (never raw readings the pipeline still needs: see raw_cutoff).
    1-hour rollups are kept. Returns what it deleted."""
    now = now or timezone.now()
    raw_before = raw_cutoff(now)
    minute_before = now - dt.timedelta(days=settings.RETENTION_1M_DAYS)
    bounds = {"chunk": chunk, "max_chunks": max_chunks}
    return {
        "readings": _prune(Reading.objects.all(), "ts", raw_before, **bounds),
        "xid_events": _prune(XidEvent.objects.all(), "ts", raw_before, **bounds),
        # Batch rows are the idempotency keys; agents never resend anything this old (readings
        # older than INGEST_MAX_AGE_HOURS are refused anyway), and finished ones are no longer work.
        "batches": _prune(finished_batches(), "received_at", raw_before, **bounds),
        "rollups_1m": _prune(Rollup1m.objects.all(), "bucket", minute_before, **bounds),
    }
