"""Incremental 1-minute and 1-hour rollups per GPU.

The work queue is the batch table: every stored batch is rolled up once. For each claimed batch
the minute buckets it touched (its GPUs × its time span) are recomputed from the raw readings
and upserted, then the hour buckets from the minute ones. Recomputing whole buckets makes the
job idempotent: running it twice, or after a crash half-way, gives the same rollups.
"""

import datetime as dt
from collections import defaultdict

from django.db import transaction
from django.db.models import Avg, Count, F, Max, Min, Q, Sum
from django.db.models.functions import TruncHour, TruncMinute

from portal.telemetry.models import (
    ROLLUP_METRICS,
    THERMAL_THROTTLE_MASK,
    IngestBatch,
    Reading,
    Rollup1h,
    Rollup1m,
)

CLAIM_BATCHES = 500
_STAT_FIELDS = [f"{metric}_{stat}" for metric in ROLLUP_METRICS for stat in ("min", "max", "mean")]
_UPDATE_FIELDS = ["count", "thermal_throttle_count", "xid_count", "energy_mj_max", *_STAT_FIELDS]


def _minute(moment: dt.datetime) -> dt.datetime:
    return moment.replace(second=0, microsecond=0)


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _spans_by_gpu(batches) -> dict[int, list[tuple[dt.datetime, dt.datetime]]]:
    """GPU id → minute spans [start, end) touched by these batches (their GPUs × time spans)."""
    host_spans = defaultdict(list)
    for batch in batches:
        if batch.first_ts is not None:
            host_spans[batch.host_id].append(
                (_minute(batch.first_ts), _minute(batch.last_ts) + dt.timedelta(minutes=1))
            )
    spans = defaultdict(list)
    if not host_spans:
        return spans
    # GPUs that had readings in those spans (a host's batch covers its GPUs).
    condition = Q()
    for host_id, host_windows in host_spans.items():
        for start, end in host_windows:
            condition |= Q(gpu__host_id=host_id, ts__gte=start, ts__lt=end)
    gpu_hosts = Reading.objects.filter(condition).values_list("gpu_id", "gpu__host_id").distinct()
    for gpu_id, host_id in gpu_hosts:
        spans[gpu_id].extend(host_spans[host_id])
    return spans


def _merged(windows: list[tuple[dt.datetime, dt.datetime]]) -> list[tuple[dt.datetime, dt.datetime]]:
    merged = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _minute_rollups(gpu_id: int, start: dt.datetime, end: dt.datetime) -> list[Rollup1m]:
    aggregates = {}
    for metric in ROLLUP_METRICS:
        aggregates[f"{metric}_min"] = Min(metric)
        aggregates[f"{metric}_max"] = Max(metric)
        aggregates[f"{metric}_mean"] = Avg(metric)
    rows = (
        Reading.objects.filter(gpu_id=gpu_id, ts__gte=start, ts__lt=end)
        # Bitwise AND is spelled alike on PostgreSQL and SQLite.
        .annotate(minute=TruncMinute("ts"), thermal_bits=F("throttle_reasons").bitand(THERMAL_THROTTLE_MASK))
        .values("minute")
        .annotate(
            count=Count("id"),
            thermal_throttle_count=Count("id", filter=Q(thermal_bits__gt=0)),
            xid_count=Sum("xid_count"),
            energy_mj_max=Max("energy_mj"),
            **aggregates,
        )
        .order_by()
    )
    return [
        Rollup1m(gpu_id=gpu_id, bucket=row.pop("minute"), **{**row, "xid_count": row["xid_count"] or 0}) for row in rows
    ]


def _hour_rollups(gpu_id: int, start: dt.datetime, end: dt.datetime) -> list[Rollup1h]:
    minutes = Rollup1m.objects.filter(gpu_id=gpu_id, bucket__gte=start, bucket__lt=end)
    aggregates = {}
    for metric in ROLLUP_METRICS:
        aggregates[f"{metric}_min"] = Min(f"{metric}_min")
        aggregates[f"{metric}_max"] = Max(f"{metric}_max")
    # An hour's mean is the mean of its readings. Minute means weighted by the minute's reading
    # count are not that when some readings lack the metric (null), so the means come from the
    # raw readings, which every hour a batch touches still has (retention keeps them past
    # INGEST_MAX_AGE_HOURS, and never drops readings not rolled up yet).
    raw_means = {
        row.pop("hour"): row
        for row in Reading.objects.filter(gpu_id=gpu_id, ts__gte=start, ts__lt=end)
        .annotate(hour=TruncHour("ts"))
        .values("hour")
        .annotate(**{f"{metric}_mean": Avg(metric) for metric in ROLLUP_METRICS})
        .order_by()
    }
    rows = (
        minutes.annotate(hour=TruncHour("bucket"))
        .values("hour")
        .annotate(
            count_sum=Sum("count"),
            thermal_sum=Sum("thermal_throttle_count"),
            xid_sum=Sum("xid_count"),
            energy_max=Max("energy_mj_max"),
            **aggregates,
        )
        .order_by()
    )
    result = []
    for row in rows:
        values = {
            "count": row["count_sum"],
            "thermal_throttle_count": row["thermal_sum"] or 0,
            "xid_count": row["xid_sum"] or 0,
            "energy_mj_max": row["energy_max"],
        }
        means = raw_means.get(row["hour"], {})
        for metric in ROLLUP_METRICS:
            values[f"{metric}_min"] = row[f"{metric}_min"]
            values[f"{metric}_max"] = row[f"{metric}_max"]
            values[f"{metric}_mean"] = means.get(f"{metric}_mean")
        result.append(Rollup1h(gpu_id=gpu_id, bucket=row["hour"], **values))
    return result


def rollups_refresh(*, gpu_id: int, start: dt.datetime, end: dt.datetime) -> None:
    """Recompute the rollups of one GPU for the minutes in [start, end) and the hours around them."""
    start, end = _minute(start), _minute(end - dt.timedelta(microseconds=1)) + dt.timedelta(minutes=1)
    minute_rows = _minute_rollups(gpu_id, start, end)
    # Minutes whose readings are gone (none today, but retention may prune) are not left behind.
    Rollup1m.objects.filter(gpu_id=gpu_id, bucket__gte=start, bucket__lt=end).exclude(
        bucket__in=[row.bucket for row in minute_rows]
    ).delete()
    Rollup1m.objects.bulk_create(
        minute_rows, update_conflicts=True, unique_fields=["gpu", "bucket"], update_fields=_UPDATE_FIELDS
    )
    hour_start, hour_end = _hour(start), _hour(end - dt.timedelta(microseconds=1)) + dt.timedelta(hours=1)
    Rollup1h.objects.bulk_create(
        _hour_rollups(gpu_id, hour_start, hour_end),
        update_conflicts=True,
        unique_fields=["gpu", "bucket"],
        update_fields=_UPDATE_FIELDS,
    )


def rollups_process_pending(*, limit: int = CLAIM_BATCHES) -> int:
    """Roll up batches not yet rolled up. Safe to run on several workers at once: each claims
    its batches with SKIP LOCKED (PostgreSQL) and marks them done in the same transaction."""
    with transaction.atomic():
        batches = list(
            IngestBatch.objects.select_for_update(skip_locked=True)
            .filter(rolled_up=False)
            .order_by("id")
            .only("id", "host_id", "first_ts", "last_ts")[:limit]
        )
        if not batches:
            return 0
        for gpu_id, windows in _spans_by_gpu(batches).items():
            for start, end in _merged(windows):
                rollups_refresh(gpu_id=gpu_id, start=start, end=end)
        IngestBatch.objects.filter(pk__in=[batch.pk for batch in batches]).update(rolled_up=True)
    return len(batches)
