"""Read telemetry: a GPU's series at the right resolution, the fleet's latest state."""

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from portal.core.errors import InvalidInput
from portal.fleet.models import Gpu
from portal.telemetry.columns import tuple_picker
from portal.telemetry.models import (
    READING_METRICS,
    ROLLUP_METRICS,
    HostToken,
    Reading,
    Rollup1h,
    Rollup1m,
    throttle_names,
)
from portal.telemetry.services import compression, rollup_chunks

MAX_POINTS = 2000
RESOLUTIONS = ("raw", "1m", "1h")
DEFAULT_METRICS = ("temperature_c", "power_w", "utilization_gpu_pct", "fan_speed_pct")
_STEP = {"1m": dt.timedelta(minutes=1), "1h": dt.timedelta(hours=1)}
_ROLLUP_MODELS = {"1m": Rollup1m, "1h": Rollup1h}


def _refused(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field}: {message}", problems=[(field, message)])


def _too_many_points(resolution: str, start: dt.datetime, end: dt.datetime) -> InvalidInput:
    """Every answer holds at most READINGS_MAX_POINTS points, whatever the resolution asked for:
    past it, a 400 that says how to ask instead (a shorter span, a coarser resolution, or auto)."""
    limit = settings.READINGS_MAX_POINTS
    if resolution in _STEP:
        latest_from = end - _STEP[resolution] * (limit - 1)
        span_hint = f"'from' at {latest_from.isoformat()} or later"
    else:
        span_hint = "a shorter span"
    coarser = {"raw": "1m", "1m": "1h"}.get(resolution)
    resolution_hint = f"resolution={coarser} or auto" if coarser else "resolution=auto"
    message = f"more than {limit:,} points at resolution {resolution} from 'from' to 'to'"
    return InvalidInput(
        message,
        problems=[("from", f"{message}: ask for {span_hint}"), ("resolution", f"{message}: ask for {resolution_hint}")],
    )


@dataclass
class Series:
    resolution: str
    start: dt.datetime
    end: dt.datetime
    ts: list[dt.datetime]
    values: dict[str, list]
    minimum: dict[str, list] | None = None
    maximum: dict[str, list] | None = None


def readings_of(
    *,
    gpu_ids: list[int],
    columns: tuple[str, ...],
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    start_open: bool = False,
    end_closed: bool = False,
    descending: bool = False,
    limit: int | None = None,
    epoch: bool = False,
    compressed_only: bool = False,
) -> list[tuple]:
    """The readings of these GPUs from start (included unless start_open) to end (excluded unless
    end_closed), raw or compressed alike (services/compression.py), as tuples of `columns`
    (reading column names, e.g. "ts", "temperature_c"), in (gpu_id, ts) order, or reversed with
    `descending`; at most `limit`. A raw reading at the instant of a compressed one (a late
    duplicate) is left out, as a second reading of a GPU at one instant always is. `epoch`: ts as
    seconds since the epoch (a float; on PostgreSQL the database computes it, cheaper than parsing
    thousands of timestamps in Python). `compressed_only`: the compressed readings alone, for a
    reader that aggregates the raw ones in the database (a late duplicate is then counted twice)."""
    wanted = tuple(dict.fromkeys(("gpu_id", "ts", *columns)))
    raw = Reading.objects.filter(gpu_id__in=list(gpu_ids))
    if start is not None:
        raw = raw.filter(**{"ts__gt" if start_open else "ts__gte": start})
    if end is not None:
        raw = raw.filter(**{"ts__lte" if end_closed else "ts__lt": end})
    order = ("-gpu_id", "-ts") if descending else ("gpu_id", "ts")
    raw = raw.order_by(*order)
    postgres = connection.vendor == "postgresql"
    if epoch and postgres:
        raw = raw.annotate(epoch_s=RawSQL("EXTRACT(EPOCH FROM ts)::float8", ())).values_list(
            *("epoch_s" if name == "ts" else name for name in wanted)
        )
    else:
        raw = raw.values_list(*wanted)
    rows = [] if compressed_only else list(raw if limit is None else raw[:limit])
    if epoch and not postgres:
        rows = [(row[0], row[1].timestamp(), *row[2:]) for row in rows]
    packed = compression.chunk_readings(
        list(gpu_ids), start, end, wanted, start_open=start_open, end_closed=end_closed, descending=descending,
        limit=limit, epoch=epoch,
    )  # fmt: skip
    if packed:
        stored = {(row[0], row[1]) for row in packed}
        rows = sorted(packed + [row for row in rows if (row[0], row[1]) not in stored], key=lambda row: row[:2],
                      reverse=descending)  # fmt: skip
        if limit is not None:
            rows = rows[:limit]
    if wanted == columns:
        return rows
    return list(map(tuple_picker([wanted.index(name) for name in columns]), rows))


def rollups_of(
    *,
    gpu_ids: list[int],
    resolution: str,
    columns: tuple[str, ...],
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> list[tuple]:
    """The rollups ("1m" or "1h") of these GPUs with start <= bucket < end, raw rows and compressed
    days alike (services/rollup_chunks.py), as tuples of `columns` ("gpu_id", "bucket" and rollup
    fields, e.g. "temperature_c_mean"), in (gpu_id, bucket) order. A raw row of a bucket that is
    also compressed (written again after a late reading) is the one given: the next compression
    run merges it. Every reader of rollups reads them here."""
    model = _ROLLUP_MODELS[resolution]
    wanted = tuple(dict.fromkeys(("gpu_id", "bucket", *columns)))
    raw = model.objects.filter(gpu_id__in=list(gpu_ids))
    if start is not None:
        raw = raw.filter(bucket__gte=start)
    if end is not None:
        raw = raw.filter(bucket__lt=end)
    # Raw rows first: a compression run committing in between moves rows into a chunk, never out.
    rows = list(raw.order_by("gpu_id", "bucket").values_list(*wanted))
    packed = rollup_chunks.chunk_rollups(resolution, list(gpu_ids), start, end, wanted)
    if packed:
        stored = {(row[0], row[1]) for row in rows}
        rows = sorted(rows + [row for row in packed if (row[0], row[1]) not in stored], key=lambda row: row[:2])
    if wanted == columns:
        return rows
    return list(map(tuple_picker([wanted.index(name) for name in columns]), rows))


def compressed_hour_counts(spans: list[tuple[int, dt.datetime, dt.datetime]]) -> dict[tuple[int, dt.datetime], int]:
    """Compressed readings per GPU-hour in these (gpu_id, lo, hi) spans, {(gpu_id, hour): count}:
    with a count of raw readings per hour, how many readings each hour holds."""
    return compression.chunk_hour_counts(spans)


def resolution_for(*, gpu: Gpu, start: dt.datetime, end: dt.datetime) -> str:
    """The finest resolution that keeps the answer under MAX_POINTS points."""
    raw_count = Reading.objects.filter(gpu=gpu, ts__gte=start, ts__lt=end).order_by()[: MAX_POINTS + 1].count()
    if raw_count <= MAX_POINTS:
        raw_count += compression.chunk_count(gpu.pk, start, end)
    if raw_count <= MAX_POINTS:
        return "raw"
    if (end - start) / _STEP["1m"] <= MAX_POINTS:
        return "1m"
    return "1h"


def gpu_series(
    *, gpu: Gpu, start: dt.datetime, end: dt.datetime, metrics: tuple[str, ...], resolution: str = "auto"
) -> Series:
    if end <= start:
        raise _refused("from", "must be before 'to'")
    if resolution == "auto":
        resolution = resolution_for(gpu=gpu, start=start, end=end)
    if resolution not in RESOLUTIONS:
        raise _refused("resolution", f"one of auto, {', '.join(RESOLUTIONS)}")
    allowed = (*READING_METRICS, "xid_count") if resolution == "raw" else ROLLUP_METRICS
    unknown = [metric for metric in metrics if metric not in allowed]
    if unknown:
        raise _refused("metrics", f"not available at resolution {resolution}: {', '.join(unknown)}")
    limit = settings.READINGS_MAX_POINTS
    if resolution == "raw":
        rows = readings_of(gpu_ids=[gpu.pk], columns=("ts", *metrics), start=start, end=end, limit=limit + 1)
        if len(rows) > limit:
            raise _too_many_points(resolution, start, end)
        values = {metric: [row[position + 1] for row in rows] for position, metric in enumerate(metrics)}
        if "throttle_reasons" in values:
            values["throttle_reasons"] = [throttle_names(mask) for mask in values["throttle_reasons"]]
        return Series(resolution, start, end, [row[0] for row in rows], values)
    if (end - start) / _STEP[resolution] + 1 > limit:  # buckets from the one holding 'from' on
        raise _too_many_points(resolution, start, end)
    columns = [f"{metric}_{stat}" for metric in metrics for stat in ("mean", "min", "max")]
    rows = rollups_of(
        gpu_ids=[gpu.pk], resolution=resolution, columns=("bucket", *columns), start=start - _STEP[resolution], end=end
    )
    series = Series(resolution, start, end, [row[0] for row in rows], {}, {}, {})
    for position, metric in enumerate(metrics):
        base = 1 + position * 3
        series.values[metric] = [_round(row[base]) for row in rows]
        series.minimum[metric] = [_round(row[base + 1]) for row in rows]
        series.maximum[metric] = [_round(row[base + 2]) for row in rows]
    return series


def _round(value):
    return None if value is None else round(value, 2)


def gpus_with_latest(queryset: QuerySet[Gpu] | None = None) -> QuerySet[Gpu]:
    queryset = Gpu.objects.all() if queryset is None else queryset
    return queryset.select_related("host", "latest")


def host_tokens(*, host) -> list[HostToken]:
    return list(HostToken.objects.filter(host=host).select_related("created_by"))
