"""Reads for the live pages: a batch's points, the fleet's state for the heatmap and tiles, the
data a GPU page's charts start from."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db.models import Subquery
from django.urls import reverse
from django.utils import timezone

from portal.fleet.models import Gpu, MaintenanceRecord
from portal.maintenance import selectors as maintenance_selectors
from portal.telemetry.models import THROTTLE_BIT, IngestBatch, Reading

# The compact point: one list per reading, in this order (the pages read the names from "fields").
POINT_FIELDS = (
    "gpu_id", "ts", "temperature_c", "power_w", "power_limit_w", "utilization_gpu_pct",
    "utilization_memory_pct", "fan_speed_pct", "sm_clock_mhz", "mem_clock_mhz", "memory_used_mib",
    "throttle_reasons",
)  # fmt: skip
READING_COLUMNS = POINT_FIELDS[2:]

# Clock event reasons that mean "slowed down because of heat or power", for the throttling tile.
THROTTLING_MASK = (
    THROTTLE_BIT["hw_thermal"] | THROTTLE_BIT["sw_thermal"] | THROTTLE_BIT["hw_slowdown"]
    | THROTTLE_BIT["hw_power_brake"]
)  # fmt: skip


def ts_ms(moment: dt.datetime) -> int:
    return round(moment.timestamp() * 1000)


def batch_points(*, batch_pk: int, gpu_ids: list[int]) -> list[list]:
    """The batch's readings as compact points (POINT_FIELDS), oldest first, in one query.

    Readings carry no batch key, so this selects the batch's GPUs over the batch's time span.
    A reading of another batch in the same span (an agent's spool replay) may come along; the
    pages merge points by timestamp, so that costs nothing.
    """
    batch = IngestBatch.objects.filter(pk=batch_pk)
    rows = (
        Reading.objects.filter(
            gpu_id__in=gpu_ids,
            ts__gte=Subquery(batch.values("first_ts")[:1]),
            ts__lte=Subquery(batch.values("last_ts")[:1]),
        )
        .order_by("ts")
        .values_list("gpu_id", "ts", *READING_COLUMNS)
    )
    return [[row[0], ts_ms(row[1]), *row[2:]] for row in rows]


def _hot_threshold(gpu: Gpu) -> int:
    margin = settings.LIVE_HOT_MARGIN_C
    return gpu.temp_slowdown_c - margin if gpu.temp_slowdown_c else settings.LIVE_HOT_DEFAULT_C


def fleet_live_state() -> dict:
    """Every GPU in service (and out for repair) with its latest reading, grouped by host: what
    the heatmap and the status tiles start from. One query whatever the fleet size."""
    gpus = (
        Gpu.objects.exclude(status=Gpu.Status.RETIRED)
        .select_related("host", "latest")
        .order_by("host__hostname", "index")
    )
    now = timezone.now()
    rows = []
    for gpu in gpus:
        latest = getattr(gpu, "latest", None)
        rows.append(
            {
                "id": gpu.pk,
                "uuid": gpu.uuid,
                "host": gpu.host.hostname,
                "host_id": gpu.host_id,
                "index": gpu.index,
                "model": gpu.model_name,
                "url": gpu.get_absolute_url(),
                "hot_c": _hot_threshold(gpu),
                "ts": ts_ms(latest.ts) if latest else None,
                "temperature_c": latest.temperature_c if latest else None,
                "utilization_gpu_pct": latest.utilization_gpu_pct if latest else None,
                "throttle_reasons": latest.throttle_reasons if latest else None,
            }
        )
    return {
        "gpus": rows,
        "now": ts_ms(now),
        "silent_after_s": settings.LIVE_SILENT_AFTER_S,
        "throttling_mask": THROTTLING_MASK,
        "ws": "/ws/live/fleet/",
    }


def open_ticket_counts() -> dict:
    """Open tickets by severity, for the fleet page's tile."""
    return dict(maintenance_selectors.open_ticket_counts())


def gpu_live_config(*, gpu: Gpu, records) -> dict:
    """What a GPU page's charts need: limits for the reference lines and the maintenance markers."""
    markers = [
        {
            "ts": ts_ms(record.performed_at),
            "kind": record.kind,
            "label": MaintenanceRecord.Kind(record.kind).label,
            "url": record.get_absolute_url(),
        }
        for record in records
    ]
    return {
        "id": gpu.pk,
        "uuid": gpu.uuid,
        "slowdown_c": gpu.temp_slowdown_c,
        "shutdown_c": gpu.temp_shutdown_c,
        "power_limit_default_w": gpu.power_limit_default_w,
        "memory_total_mib": gpu.memory_total_mib,
        "readings_url": reverse("api:gpu_readings", kwargs={"uuid": gpu.uuid}),
        "ws": f"/ws/live/gpu/{gpu.uuid}/",
        "markers": markers,
        "throttling_mask": THROTTLING_MASK,
    }
