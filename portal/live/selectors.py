"""Reads for the live pages: a batch's points, the fleet's state for the heatmap and tiles, the
data a GPU page's charts start from."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.db.models.functions import Greatest
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext

from portal.core.converters import url_segment
from portal.core.db import EpochMs
from portal.fleet import selectors as fleet_selectors
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.services.tickets import FEED_EVENT_KINDS, feed_change
from portal.maintenance.xid_catalog import xid_entry
from portal.telemetry import metrics, store
from portal.telemetry import selectors as telemetry_selectors
from portal.telemetry.columns import ReadingColumns
from portal.telemetry.selectors import THROTTLE_BIT

if TYPE_CHECKING:
    from portal.fleet.models import Gpu

# The compact point: one list per reading, its values in this order after its GPU and time (ms): the
# registry's live metrics (portal/telemetry/metrics.py; the pages read the names from "fields").
POINT_COLUMNS = ReadingColumns(*metrics.names(live=True))
READING_COLUMNS = POINT_COLUMNS.names
POINT_FIELDS = ("gpu_id", "ts", *READING_COLUMNS)

# Clock event reasons that mean "slowed down because of heat or power", for the throttling tile.
THROTTLING_MASK = (
    THROTTLE_BIT["hw_thermal"] | THROTTLE_BIT["sw_thermal"] | THROTTLE_BIT["hw_slowdown"]
    | THROTTLE_BIT["hw_power_brake"]
)  # fmt: skip


def ts_ms(moment: dt.datetime) -> int:
    return round(moment.timestamp() * 1000)


def batch_points(*, batch_pk: int, gpu_ids: list[int]) -> list[list]:
    """The batch's readings as compact points (POINT_FIELDS), oldest first: the batch's span, then
    its readings (store.readings_of: raw, or compressed when a late batch landed in an old hour).

    Readings carry no batch key, so this selects the batch's GPUs over the batch's time span.
    A reading of another batch in the same span (an agent's spool replay) may come along; the
    pages merge points by timestamp, so that costs nothing.
    """
    span = telemetry_selectors.ingest_batches().filter(pk=batch_pk).values_list("first_ts", "last_ts").first()
    if span is None or span[0] is None:
        return []
    rows = store.readings_of(gpu_ids=gpu_ids, columns=POINT_FIELDS, start=span[0], end=span[1], end_closed=True)
    rows.sort(key=lambda row: row[1])
    return [[row[0], ts_ms(row[1]), *row[2:]] for row in rows]


def fleet_live_state() -> dict:
    """Every GPU in service (and out for repair) with its latest reading, in host order: what the
    heatmap and the status tiles start from. "Hot" and "silent" are the overheat and agent_silent
    rules' limits in force for each GPU's host, and the page judges silence as agent_silent does:
    nothing heard from the GPU for longer than `silent_after_s`, heard being its newest reading's
    time or that reading's arrival, whichever is later (an agent delivering its spool after an
    outage sends old readings and is not silent), for GPUs in service on active hosts only (no
    limit for the others: the rule does not watch them). Two queries whatever the fleet size (the
    GPUs, the rule configuration). Rows are lists in GPU_STATE_FIELDS order, times in epoch
    milliseconds from the database, to keep 5,000 GPUs small and quick."""
    gpus = list(
        fleet_selectors.gpus()
        .exclude(status=fleet_selectors.GpuStatus.RETIRED)
        .order_by("host__hostname", "index")
        .values_list(
            "id", "uuid", "host__hostname", "host_id", "index", "temp_slowdown_c", EpochMs("latest__ts"),
            EpochMs(Greatest("latest__ts", "latest__received_at")),
            *(f"latest__{metric.name}" for metric in FLEET_METRICS.values()), "status", "host__status",
        )
    )  # fmt: skip
    limits = maintenance_selectors.RuleCareLimits()
    hot_limits, silent_limits = {}, {}  # per host (and slowdown): asked once, not per GPU
    rows = []
    for row in gpus:
        gpu_id, uuid, hostname, host_id, index, slowdown_c, ts, heard, temperature, utilization, throttle = row[:11]
        status, host_status = row[11:]
        if (host_id, slowdown_c) not in hot_limits:
            hot_limits[host_id, slowdown_c] = limits.hot_c(host_id=host_id, slowdown_c=slowdown_c)
        if host_id not in silent_limits:
            silent_limits[host_id] = limits.silent_after_s(host_id=host_id)
        hot_c = hot_limits[host_id, slowdown_c]
        watched = status == fleet_selectors.GpuStatus.IN_SERVICE and host_status == fleet_selectors.HostStatus.ACTIVE
        silent_s = silent_limits[host_id] if watched else None
        rows.append([
            gpu_id, uuid, hostname, index, hot_c, silent_s, ts, heard, temperature, utilization, throttle,
        ])  # fmt: skip
    return {
        "fields": GPU_STATE_FIELDS,
        "metrics": {role: metric.name for role, metric in FLEET_METRICS.items()},
        "gpus": rows,
        "now": ts_ms(timezone.now()),
        "throttling_mask": THROTTLING_MASK,
        "gpu_url": reverse("fleet:gpu", kwargs={"uuid": "UUID"}),
        "ws": "/ws/live/fleet/",
    }


# The newest reading's metrics the fleet page shows, by what the page does with them (the heatmap's
# temperature, the tiles' hot GPUs and throttling); the state serves which field is which ("metrics").
FLEET_METRICS = {"temperature": metrics.TEMPERATURE, "utilization": metrics.UTILIZATION_GPU,
                 "reasons": metrics.THROTTLE_REASONS}  # fmt: skip
GPU_STATE_FIELDS = (
    "id", "uuid", "host", "index", "hot_c", "silent_after_s", "ts", "heard",
    *(metric.name for metric in FLEET_METRICS.values()),
)  # fmt: skip


def open_ticket_counts() -> dict:
    """Open tickets by severity, for the fleet page's tile."""
    return dict(maintenance_selectors.open_ticket_counts())


MARKERS_SINCE = dt.timedelta(days=30)  # the longest range the GPU page's charts show
FEED_LATEST = 10  # the ticket feed's items before live ones arrive


def ticket_feed_latest(*, limit: int = FEED_LATEST) -> list[dict]:
    """The latest ticket changes people watch for, newest first, as the live feed shows them
    (the keys of publish.ticket_changed's items; the title in the page's language): a feed starts
    with these, not empty. One query."""
    items = []
    for event in maintenance_selectors.ticket_events_latest(kinds=FEED_EVENT_KINDS, limit=limit):
        change = feed_change(event)
        if not change:
            continue
        ticket = event.ticket
        items.append({
            "ticket_id": ticket.pk, "event": change, "severity": ticket.severity, "title": ticket.title_shown,
            "url": ticket.get_absolute_url(), "at": event.at, "by": event.user.get_username() if event.user_id else "",
            "hostname": ticket.host.hostname, "gpu_label": f"GPU {ticket.gpu.index}" if ticket.gpu_id else "",
        })  # fmt: skip
        if len(items) == limit:
            break
    return items


def gpu_live_config(*, gpu: Gpu, records, limits) -> dict:
    """What a GPU page's charts need: limits for the reference lines and the maintenance markers,
    the newest reading and the silence limit in force (`limits`: the page's care limits)."""
    markers = [
        {
            "ts": ts_ms(record.performed_at),
            "group": "record",
            "kind": record.kind,
            "label": str(fleet_selectors.Kind(record.kind).label),  # in the page's language
            "url": record.get_absolute_url(),
        }
        for record in records
    ]
    since = timezone.now() - MARKERS_SINCE
    for at, code in telemetry_selectors.xid_events_of(gpu=gpu, since=since):
        description = xid_entry(code).description_shown  # in the page's language
        label = gettext("XID %(code)s: %(description)s") % {"code": code, "description": description}
        markers.append({"ts": ts_ms(at), "group": "xid", "kind": "xid", "label": label, "url": ""})
    for ticket in maintenance_selectors.tickets_of_gpu(gpu=gpu, since=since):
        markers.append({
            "ts": ts_ms(ticket.first_seen), "group": "ticket", "kind": ticket.severity,
            "label": gettext("Ticket #%(id)s: %(title)s") % {"id": ticket.pk, "title": ticket.title_shown},
            "url": ticket.get_absolute_url(),
        })  # fmt: skip
    watched = (
        gpu.status == fleet_selectors.GpuStatus.IN_SERVICE and gpu.host.status == fleet_selectors.HostStatus.ACTIVE
    )
    latest = gpu.latest_or_none
    return {
        "id": gpu.pk,
        "uuid": gpu.uuid,
        # Silence as the fleet page judges it (fleet_live_state): the page greys its last values
        # and says "silent" once nothing was heard for this long (None: the rule does not watch it).
        "now": ts_ms(timezone.now()),
        "silent_after_s": limits.silent_after_s(host_id=gpu.host_id) if watched else None,
        "latest": None
        if latest is None
        else {
            "ts": ts_ms(latest.ts),
            "heard": ts_ms(max(latest.ts, latest.received_at)),
            **{name: getattr(latest, name, None) for name in READING_COLUMNS},
        },
        "slowdown_c": gpu.temp_slowdown_c,
        "shutdown_c": gpu.temp_shutdown_c,
        "power_limit_default_w": gpu.power_limit_default_w,
        "memory_total_mib": gpu.memory_total_mib,
        "readings_url": reverse("api:gpu_readings", kwargs={"uuid": gpu.uuid}),
        # The metric registry, served once for the page's scripts (labels in the page's language).
        "metrics": [{**entry, "label": gettext(entry["label"])} for entry in metrics.as_json()],
        "ws": f"/ws/live/gpu/{url_segment(gpu.uuid)}/",
        "markers": markers,
        # the host's other GPUs, which the charts can draw beside this one (the Compare boxes)
        "host_gpus": [
            {
                "uuid": other.uuid,
                "label": f"GPU {other.index}",
                "readings_url": reverse("api:gpu_readings", kwargs={"uuid": other.uuid}),
            }
            for other in fleet_selectors.gpus()
            .filter(host_id=gpu.host_id)
            .exclude(pk=gpu.pk)
            .exclude(status=fleet_selectors.GpuStatus.RETIRED)
            .order_by("index")
        ],
        "throttling_mask": THROTTLING_MASK,
    }
