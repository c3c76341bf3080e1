"""The anomaly engine: judge a batch of readings against every rule, move rule states, and turn
the resulting events into tickets.

Per batch, whatever its size: one query for the readings, one for the XID events, one for the
rule states of the batch's GPUs, one for the GPUs, one for the thresholds; then Python over the
readings; then one bulk insert and one bulk update of the states that changed. Ticket work
happens only when a rule fires or clears, which is rare. The same batch twice changes nothing
(a BatchEvaluation row claims it inside the same transaction).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.maintenance.models import BatchEvaluation, RuleState, Silence
from portal.maintenance.rules import GPU_RULE_LIST, SILENCE, XID_RULES
from portal.maintenance.rules.base import (
    OK,
    READING_COLUMNS,
    Event,
    GpuInfo,
    Track,
    fingerprint,
    from_epoch,
    to_epoch,
)
from portal.maintenance.rules.xid import xid_class
from portal.maintenance.services import tickets as ticket_services
from portal.maintenance.services.config import RuleParams
from portal.maintenance.services.notify import notify_ticket
from portal.telemetry.models import IngestBatch, Reading, XidEvent

log = logging.getLogger(__name__)

GPU_INFO_FIELDS = ("id", "host_id", "status", "temp_slowdown_c", "power_limit_default_w", "pcie_link_gen_max",
                   "pcie_link_width_max")  # fmt: skip
STATE_FIELDS = ["state", "since_ts", "last_ts", "peak", "data", "updated_at"]


@dataclass
class EvaluationResult:
    readings: int = 0
    events: list[Event] = field(default_factory=list)
    tickets: list = field(default_factory=list)  # (ticket, outcome)
    duplicate: bool = False


class Tracks:
    """The RuleState rows of some subjects, loaded in one query, written back in two."""

    def __init__(self, *, gpu_ids, host_ids=(), keys=()):
        query = Q(gpu_id__in=list(gpu_ids))
        if keys:
            query |= Q(key__in=list(keys))
        if host_ids:
            query |= Q(host_id__in=list(host_ids), gpu__isnull=True)
        self.by_key: dict[str, Track] = {}
        for obj in RuleState.objects.filter(query):
            self.by_key[obj.key] = Track(
                obj.key, obj.rule, obj.host_id, obj.gpu_id, obj.state, to_epoch(obj.since_ts), to_epoch(obj.last_ts),
                obj.peak, obj.data, obj,
            )  # fmt: skip

    def get(self, rule: str, host_id: int, gpu_id: int | None) -> Track:
        key = fingerprint(rule, gpu_id=gpu_id, host_id=host_id)
        track = self.by_key.get(key)
        if track is None:
            track = self.by_key[key] = Track(key, rule, host_id, gpu_id)
            track.changed = False  # a new state that stays ok is never written
        return track

    def save(self, now: dt.datetime) -> int:
        new, changed = [], []
        for track in self.by_key.values():
            if not track.changed:
                continue
            obj = track.obj
            if obj is None:
                obj = RuleState(key=track.key, rule=track.rule, host_id=track.host_id, gpu_id=track.gpu_id)
                new.append(obj)
                track.obj = obj
            else:
                changed.append(obj)
            obj.state, obj.since_ts, obj.last_ts = track.state, from_epoch(track.since), from_epoch(track.last)
            obj.peak, obj.data, obj.updated_at = track.peak, track.data, now
            track.changed = False
        rows = new + changed
        if rows:
            # One upsert for new and changed rows (bulk_update's CASE WHEN is several times slower).
            RuleState.objects.bulk_create(
                rows, batch_size=500, update_conflicts=True, unique_fields=["key"], update_fields=STATE_FIELDS
            )
        return len(rows)


def _gpu_infos(gpu_ids) -> dict[int, GpuInfo]:
    return {row["id"]: GpuInfo(**row) for row in Gpu.objects.filter(pk__in=list(gpu_ids)).values(*GPU_INFO_FIELDS)}


class SilenceLookup:
    """Maintenance windows of some hosts, loaded once, asked per event."""

    def __init__(self, host_ids, gpus: dict[int, GpuInfo]):
        self.windows = list(
            Silence.objects.filter(host_id__in=list(host_ids)).values_list("host_id", "gpu_id", "starts_at", "ends_at")
        )
        self.gpus = gpus

    def __call__(self, host_id: int, gpu_id: int | None, at: dt.datetime) -> bool:
        gpu = self.gpus.get(gpu_id) if gpu_id is not None else None
        if gpu is not None and gpu.status == Gpu.Status.OUT_FOR_REPAIR:
            return True
        return any(
            h == host_id and (g is None or g == gpu_id) and start <= at < end for h, g, start, end in self.windows
        )


def readings_evaluate(
    *,
    host_id: int,
    readings: dict[int, list[tuple]],
    xids: dict[int, list[tuple[float, int]]] | None = None,
    now: dt.datetime | None = None,
    params: RuleParams | None = None,
    gpu_ids=None,
) -> EvaluationResult:
    """Judge readings (tuples in READING_COLUMNS order, ts as aware datetimes, sorted by ts per
    GPU) of one host's GPUs. Call inside a transaction."""
    now = now or timezone.now()
    xids = xids or {}
    gpu_ids = sorted(set(gpu_ids or ()) | set(readings) | set(xids))
    params = params or RuleParams()
    gpus = _gpu_infos(gpu_ids)
    tracks = Tracks(gpu_ids=gpu_ids, keys=[fingerprint(SILENCE.key, host_id=host_id)])
    result = EvaluationResult()
    emit = result.events.append
    for gpu_id in gpu_ids:
        gpu = gpus.get(gpu_id)
        if gpu is None:
            continue
        rows = readings.get(gpu_id) or []
        if rows:
            rows = [(row[0].timestamp(), *row[1:]) for row in rows]
            result.readings += len(rows)
            for rule in GPU_RULE_LIST:
                enabled, p = params.get(rule.key, gpu.host_id)
                if enabled:
                    rule.evaluate(tracks.get(rule.key, gpu.host_id, gpu_id), gpu, rows, p, emit)
            silent = tracks.by_key.get(fingerprint(SILENCE.key, gpu_id=gpu_id))
            if silent is not None and silent.state != OK:
                silent.state, silent.since, silent.last, silent.changed = OK, None, rows[0][0], True
                emit(Event("clear", silent, rows[0][0]))
        by_class: dict[str, list] = defaultdict(list)
        for ts, code in sorted(xids.get(gpu_id, ())):
            by_class[xid_class(code)].append((ts, code))
        for klass, events in by_class.items():
            rule = XID_RULES[klass]
            enabled, p = params.get(rule.key, gpu.host_id)
            if enabled:
                rule.evaluate_xids(tracks.get(rule.key, gpu.host_id, gpu_id), events, p, emit)
    host_silent = tracks.by_key.get(fingerprint(SILENCE.key, host_id=host_id))
    if host_silent is not None and host_silent.state != OK and result.readings:
        first = min(rows[0][0].timestamp() for rows in readings.values() if rows)
        host_silent.state, host_silent.since, host_silent.changed = OK, None, True
        emit(Event("clear", host_silent, first))
    tracks.save(now)
    result.tickets = events_apply(result.events, silenced=SilenceLookup({host_id}, gpus), params=params)
    return result


def events_apply(events: list[Event], *, silenced, params: RuleParams) -> list:
    """Turn rule events into ticket changes, group what a host shares, then notify."""
    outcomes = []
    fired_groups = set()
    for event in events:
        track = event.track
        at = from_epoch(event.ts)
        if event.kind == "fire":
            ticket, outcome = ticket_services.ticket_fire(
                rule=track.rule, host_id=track.host_id, gpu_id=track.gpu_id, at=at, value=event.value,
                severity=event.severity, evidence=event.evidence, note=event.note,
                silenced=silenced(track.host_id, track.gpu_id, at),
            )  # fmt: skip
            outcomes.append((ticket, outcome))
            if track.gpu_id is not None:
                fired_groups.add((track.rule, track.host_id, at))
        elif event.kind == "clear":
            ticket = ticket_services.ticket_auto_resolve(
                rule=track.rule, host_id=track.host_id, gpu_id=track.gpu_id, at=at, value=event.value
            )
            if ticket is not None:
                outcomes.append((ticket, "resolved"))
        else:
            ticket, outcome = ticket_services.ticket_update(
                rule=track.rule, host_id=track.host_id, gpu_id=track.gpu_id, at=at, value=event.value,
                severity=event.severity, note=event.note,
            )  # fmt: skip
            if ticket is not None:
                outcomes.append((ticket, outcome))
    seen = set()
    for rule, host_id, at in fired_groups:
        if (rule, host_id) in seen or rule == SILENCE.key:
            continue
        seen.add((rule, host_id))
        parent, outcome = ticket_services.tickets_group(
            rule=rule, host_id=host_id, at=at, fraction=settings.MAINTENANCE_GROUP_FRACTION
        )
        if outcome:
            outcomes.append((parent, outcome))
    for ticket, outcome in outcomes:
        notify_ticket(ticket=ticket, event=outcome)
    return outcomes


def batch_evaluate(*, batch_pk: int, gpu_ids: list[int] | None = None, now: dt.datetime | None = None):
    """Evaluate one stored batch (the Celery task's service). Idempotent."""
    now = now or timezone.now()
    batch = IngestBatch.objects.filter(pk=batch_pk).values("host_id", "first_ts", "last_ts").first()
    if batch is None:
        return EvaluationResult()
    if BatchEvaluation.objects.filter(batch_pk=batch_pk).exists():
        return EvaluationResult(duplicate=True)
    try:
        with transaction.atomic():
            marker = BatchEvaluation.objects.create(batch_pk=batch_pk)
            readings: dict[int, list[tuple]] = defaultdict(list)
            if batch["first_ts"] is not None:
                query = Reading.objects.filter(ts__gte=batch["first_ts"], ts__lte=batch["last_ts"])
                if gpu_ids is not None:
                    query = query.filter(gpu_id__in=gpu_ids)
                else:
                    query = query.filter(gpu__host_id=batch["host_id"])
                for row in query.order_by("gpu_id", "ts").values_list("gpu_id", *READING_COLUMNS):
                    readings[row[0]].append(row[1:])
            xids: dict[int, list] = defaultdict(list)
            for gpu_id, ts, code in XidEvent.objects.filter(batch_id=batch_pk).values_list("gpu_id", "ts", "code"):
                xids[gpu_id].append((ts.timestamp(), code))
            result = readings_evaluate(
                host_id=batch["host_id"], readings=readings, xids=xids, now=now, gpu_ids=gpu_ids
            )
            marker.readings = result.readings
            marker.save(update_fields=["readings"])
            return result
    except IntegrityError:
        if BatchEvaluation.objects.filter(batch_pk=batch_pk).exists():
            return EvaluationResult(duplicate=True)
        raise
