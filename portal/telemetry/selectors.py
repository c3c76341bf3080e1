"""Read telemetry: a GPU's series at the right resolution, the fleet's latest state."""

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet

from portal.core.errors import InvalidInput
from portal.telemetry import store
from portal.telemetry.metrics import FAN, POWER, TEMPERATURE, THROTTLE_REASONS, UTILIZATION_GPU
from portal.telemetry.models import (
    READING_METRICS,
    ROLLUP_METRICS,
    GpuLatest,
    HostToken,
    IngestBatch,
    throttle_names,
)
from portal.telemetry.models import THERMAL_THROTTLE_MASK as THERMAL_THROTTLE_MASK  # for the apps above
from portal.telemetry.models import THROTTLE_BIT as THROTTLE_BIT  # for the askers below

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu

MAX_POINTS = 2000
RESOLUTIONS = ("raw", "1m", "1h")
# The series a GPU's readings answer when none are named (GET /api/v1/gpus/{uuid}/readings).
DEFAULT_METRICS = tuple(metric.name for metric in (TEMPERATURE, POWER, UTILIZATION_GPU, FAN))
_STEP = {"1m": dt.timedelta(minutes=1), "1h": dt.timedelta(hours=1)}


def _refused(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field}: {message}", problems=[(field, message)])


def _too_many_points(resolution: str, end: dt.datetime) -> InvalidInput:
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


def resolution_for(*, gpu: "Gpu", start: dt.datetime, end: dt.datetime) -> str:
    """The finest resolution that keeps the answer under MAX_POINTS points."""
    if store.reading_count(gpu_id=gpu.pk, start=start, end=end, at_most=MAX_POINTS) <= MAX_POINTS:
        return "raw"
    if (end - start) / _STEP["1m"] <= MAX_POINTS:
        return "1m"
    return "1h"


def gpu_series(
    *, gpu: "Gpu", start: dt.datetime, end: dt.datetime, metrics: tuple[str, ...], resolution: str = "auto"
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
        rows = store.readings_of(gpu_ids=[gpu.pk], columns=("ts", *metrics), start=start, end=end, limit=limit + 1)
        if len(rows) > limit:
            raise _too_many_points(resolution, end)
        values = {metric: [row[position + 1] for row in rows] for position, metric in enumerate(metrics)}
        if THROTTLE_REASONS.name in values:  # a bit mask stored, its names answered
            values[THROTTLE_REASONS.name] = [throttle_names(mask) for mask in values[THROTTLE_REASONS.name]]
        return Series(resolution, start, end, [row[0] for row in rows], values)
    if (end - start) / _STEP[resolution] + 1 > limit:  # buckets from the one holding 'from' on
        raise _too_many_points(resolution, end)
    columns = [f"{metric}_{stat}" for metric in metrics for stat in ("mean", "min", "max")]
    rows = store.rollups_of(
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


def host_tokens(*, host) -> list[HostToken]:
    return list(HostToken.objects.filter(host=host).select_related("created_by", "replaces"))


def xid_events_of(*, gpu: "Gpu", since: dt.datetime | None = None, limit: int = 200) -> list[tuple[dt.datetime, int]]:
    """The GPU's XID events since `since` (None: all), newest first, as (time, code): the charts'
    markers, the RMA pack's timeline."""
    from portal.telemetry.models import XidEvent

    events = XidEvent.objects.filter(gpu=gpu)
    if since is not None:
        events = events.filter(ts__gte=since)
    return list(events.order_by("-ts").values_list("ts", "code")[:limit])


# --- what the apps above read of telemetry (no app imports another's models;
# .ci/own_models.py) ---


def latest_readings() -> QuerySet[GpuLatest]:
    """Each GPU's newest reading (one row per GPU that reported), as a queryset: the caller keeps
    its own filters and query count."""
    return GpuLatest.objects.all()


# Querysets, so the asking app keeps its own select_related/only and its pinned query counts; and
# the vocabulary its answers are read with (`throttle_names`, and THROTTLE_BIT: a clock event
# reason's bit in a reading's stored mask, both imported above).


def tokens_live() -> QuerySet[HostToken]:
    """The host tokens not revoked (a host's fresh one during a rotation makes two)."""
    return HostToken.objects.filter(revoked_at__isnull=True)


def token_live_sql(*, host_id: str) -> str:
    """`tokens_live` as an SQL condition for a hand-written query (remote write's host lookup, where
    compiling a queryset costs a write more CPU than the query): true when the host whose id is
    the SQL expression `host_id` has a live token."""
    table = connection.ops.quote_name(HostToken._meta.db_table)
    return (
        f"EXISTS (SELECT 1 FROM {table} live_token"
        f" WHERE live_token.host_id = {host_id} AND live_token.revoked_at IS NULL)"
    )


def ingest_batches() -> QuerySet[IngestBatch]:
    return IngestBatch.objects.all()
