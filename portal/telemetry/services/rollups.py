"""Incremental 1-minute and 1-hour rollups per GPU.

A stage of the pipeline (portal.telemetry.pipeline): for the batches of a pass it recomputes,
from the raw readings, every minute and hour bucket they touched (their hosts' GPUs × their time
spans): one aggregate query for all the minutes of the pass and one for all its hours, whatever
the number of GPUs, then one upsert of each. Whole buckets are recomputed, so a late batch's
readings join the minute and hour they belong to, whatever came before.
"""

import datetime as dt
from collections import defaultdict

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from portal.telemetry.models import ROLLUP_METRICS, THERMAL_THROTTLE_MASK, Reading, Rollup1h, Rollup1m
from portal.telemetry.pipeline import Prepared
from portal.telemetry.services import compression

_STAT_FIELDS = [f"{metric}_{stat}" for metric in ROLLUP_METRICS for stat in ("min", "max", "mean")]
_UPDATE_FIELDS = ["count", "thermal_throttle_count", "xid_count", "energy_mj_max", *_STAT_FIELDS]
_SPANS_PER_STATEMENT = 300  # (GPU, start, end) rows in one statement's VALUES list
_MINUTE, _HOUR = dt.timedelta(minutes=1), dt.timedelta(hours=1)


def _minute(moment: dt.datetime) -> dt.datetime:
    return moment.replace(second=0, microsecond=0)


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _merged(windows: list[tuple[dt.datetime, dt.datetime]]) -> list[tuple[dt.datetime, dt.datetime]]:
    merged = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _bucket_sql(column: str, width: dt.timedelta) -> str:
    """The start of the minute or hour a timestamp column falls in, as the column stores it.
    SQLite keeps datetimes as UTC text ('YYYY-MM-DD HH:MM:SS[.ffffff]'): cut the text, in C,
    rather than call Django's Python function for every reading."""
    if connection.vendor == "postgresql":
        return f"date_trunc('{'minute' if width == _MINUTE else 'hour'}', {column})"
    return f"(substr({column}, 1, 16) || ':00')" if width == _MINUTE else f"(substr({column}, 1, 13) || ':00:00')"


def _aggregate_sql(width: dt.timedelta, spans: int) -> str:
    """(gpu_id, bucket, *_UPDATE_FIELDS) of the readings within `spans` (gpu_id, start, end) rows,
    per GPU and bucket; the spans of one GPU must not overlap."""
    reading = Reading._meta.db_table
    bucket = _bucket_sql("r.ts", width)
    stats = []
    for metric in ROLLUP_METRICS:
        stats += [f"MIN(r.{metric})", f"MAX(r.{metric})", f"AVG(r.{metric})"]
    postgres = connection.vendor == "postgresql"
    span_row = "(%s::bigint, %s::timestamptz, %s::timestamptz)" if postgres else "(%s, %s, %s)"
    return (
        f"WITH spans (gpu_id, lo, hi) AS (VALUES {', '.join([span_row] * spans)}) "
        f"SELECT r.gpu_id, {bucket} AS bucket, COUNT(*), "
        # Bitwise AND is spelled alike on PostgreSQL and SQLite.
        f"COUNT(CASE WHEN (r.throttle_reasons & {THERMAL_THROTTLE_MASK}) > 0 THEN 1 END), "
        f"COALESCE(SUM(r.xid_count), 0), MAX(r.energy_mj), {', '.join(stats)} "
        f"FROM spans JOIN {reading} r ON r.gpu_id = spans.gpu_id AND r.ts >= spans.lo AND r.ts < spans.hi "
        f"GROUP BY r.gpu_id, {bucket}"
    )


def _upsert_sql(model) -> str:
    columns = ["gpu_id", "bucket", *_UPDATE_FIELDS]
    updates = ", ".join(f"{name} = excluded.{name}" for name in _UPDATE_FIELDS)
    return (
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT (gpu_id, bucket) DO UPDATE SET {updates}"
    )


def _aggregates(spans: list[tuple[int, dt.datetime, dt.datetime]], width: dt.timedelta) -> list[tuple]:
    """The buckets of these spans recomputed from the raw readings, rows as _aggregate_sql has them
    (buckets as the database returns them: written back as they are)."""
    adapt = connection.ops.adapt_datetimefield_value
    rows = []
    with connection.cursor() as cursor:
        for first in range(0, len(spans), _SPANS_PER_STATEMENT):
            part = spans[first : first + _SPANS_PER_STATEMENT]
            params = [value for gpu_id, lo, hi in part for value in (gpu_id, adapt(lo), adapt(hi))]
            cursor.execute(_aggregate_sql(width, len(part)), params)
            rows += cursor.fetchall()
    return rows


def _aggregates_of(spans: list[tuple[int, dt.datetime, dt.datetime]], width: dt.timedelta) -> list[tuple]:
    """_aggregates computed here from raw and compressed readings alike: for the GPUs with a late
    reading in an hour already compressed (services/compression.py), rare."""
    from portal.telemetry.selectors import readings_of

    columns = ("ts", "throttle_reasons", "xid_count", "energy_mj", *ROLLUP_METRICS)
    rows = []
    for gpu_id, lo, hi in spans:
        buckets = defaultdict(list)
        for reading in readings_of(gpu_ids=[gpu_id], columns=columns, start=lo, end=hi):
            bucket = _minute(reading[0]) if width == _MINUTE else _hour(reading[0])
            buckets[bucket].append(reading)
        for bucket, readings in sorted(buckets.items()):
            thermal = sum(1 for r in readings if r[1] is not None and r[1] & THERMAL_THROTTLE_MASK)
            energy = [r[3] for r in readings if r[3] is not None]
            stats = []
            for position in range(4, len(columns)):
                values = [r[position] for r in readings if r[position] is not None]
                stats += [min(values), max(values), sum(values) / len(values)] if values else [None, None, None]
            xids = sum(r[2] or 0 for r in readings)
            rows.append((gpu_id, bucket, len(readings), thermal, xids, max(energy, default=None), *stats))
    return rows


def _aggregates_all(spans: list[tuple[int, dt.datetime, dt.datetime]], width: dt.timedelta) -> list[tuple]:
    # Only hours older than READINGS_COMPRESS_AFTER_HOURS can be compressed: fresh batches (all
    # but late ones) cost no query.
    compressed_before = timezone.now() - dt.timedelta(hours=settings.READINGS_COMPRESS_AFTER_HOURS) + _HOUR
    old = [(gpu_id, _hour(lo), hi) for gpu_id, lo, hi in spans if lo < compressed_before]
    packed = {gpu_id for gpu_id, _ in compression.chunk_hour_counts(old)}
    if not packed:
        return _aggregates(spans, width)
    return _aggregates([span for span in spans if span[0] not in packed], width) + _aggregates_of(
        [span for span in spans if span[0] in packed], width
    )


def _recompute(spans_by_gpu: dict[int, list[tuple[dt.datetime, dt.datetime]]]) -> tuple[list, list, list]:
    """The minutes in these spans (minute-aligned) and the hours around them, recomputed from the
    raw readings, and the ids of minute rows left without readings: what _write writes. Reads only."""
    minute_spans = [(gpu_id, lo, hi) for gpu_id, spans in spans_by_gpu.items() for lo, hi in _merged(spans)]
    hour_spans = [
        (gpu_id, lo, hi)
        for gpu_id, spans in spans_by_gpu.items()
        for lo, hi in _merged([(_hour(lo), _hour(hi - dt.timedelta(microseconds=1)) + _HOUR) for lo, hi in spans])
    ]
    minutes = _aggregates_all(minute_spans, _MINUTE)
    empty = _empty_minutes(minute_spans, {(row[0], _key(row[1])) for row in minutes})
    return minutes, _aggregates_all(hour_spans, _HOUR), empty


def _write(minutes: list, hours: list, empty: list[int]) -> None:
    if empty:
        Rollup1m.objects.filter(pk__in=empty).delete()
    with connection.cursor() as cursor:
        for model, rows in ((Rollup1m, minutes), (Rollup1h, hours)):
            if rows:
                cursor.executemany(_upsert_sql(model), rows)


def _key(bucket):
    """A bucket as the aggregate and the table give it back alike (SQLite: the text stored; the
    table's column comes back as a naive datetime, the aggregate's as the text)."""
    return bucket if connection.vendor == "postgresql" else str(bucket)


def _empty_minutes(spans: list[tuple[int, dt.datetime, dt.datetime]], kept: set[tuple]) -> list[int]:
    """Minute rows in these spans whose readings are gone (none today, but retention may prune):
    not to be left behind."""
    adapt = connection.ops.adapt_datetimefield_value
    table = Rollup1m._meta.db_table
    with connection.cursor() as cursor:
        stale = []
        for first in range(0, len(spans), _SPANS_PER_STATEMENT):
            part = spans[first : first + _SPANS_PER_STATEMENT]
            condition = " OR ".join(["(gpu_id = %s AND bucket >= %s AND bucket < %s)"] * len(part))
            params = [value for gpu_id, lo, hi in part for value in (gpu_id, adapt(lo), adapt(hi))]
            cursor.execute(f"SELECT id, gpu_id, bucket FROM {table} WHERE {condition}", params)
            stale += [pk for pk, gpu_id, bucket in cursor.fetchall() if (gpu_id, _key(bucket)) not in kept]
    return stale


def rollups_refresh(*, gpu_id: int, start: dt.datetime, end: dt.datetime) -> None:
    """Recompute the rollups of one GPU for the minutes in [start, end) and the hours around them."""
    start, end = _minute(start), _minute(end - dt.timedelta(microseconds=1)) + _MINUTE
    with transaction.atomic():
        _write(*_recompute({gpu_id: [(start, end)]}))


def _spans_by_gpu(batches, gpu_hosts: dict[int, int]) -> dict[int, list[tuple[dt.datetime, dt.datetime]]]:
    """GPU id → minute spans [start, end) touched by these batches (a host's batch covers its GPUs)."""
    host_spans = defaultdict(list)
    for batch in batches:
        if batch.first_ts is not None:
            host_spans[batch.host_id].append((_minute(batch.first_ts), _minute(batch.last_ts) + _MINUTE))
    return {gpu_id: host_spans[host_id] for gpu_id, host_id in gpu_hosts.items() if host_id in host_spans}


def rollups_prepare(block) -> Prepared:
    """The rollups stage (telemetry.pipeline): the minutes and hours a block's batches touched,
    recomputed from the raw readings (reads only); written by the pass."""
    computed = _recompute(_spans_by_gpu(block.batches, block.gpu_hosts))
    return Prepared(apply=lambda: _write(*computed))
