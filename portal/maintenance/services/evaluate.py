"""The anomaly engine: judge stored batches of readings against every rule, move rule states, and
turn the resulting events into tickets.

The rules are a stage of the pipeline (portal.telemetry.pipeline): a pass hands them a block of
stored batches with their readings already read, and they judge it together: one query for the
rule states of all its GPUs, one for the GPUs, one for the thresholds; then Python over the
readings, GPU by GPU in reading-time order; then one upsert of the states that changed. Ticket
work happens only when a rule fires or clears, which is rare. The fixed cost is paid once per
pass, so a worker that falls behind catches up in big, cheap passes. Passes run one at a time and
the pipeline's ledger says which batches the rules have judged, so no batch is judged twice and
one GPU's batches are judged in order.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from portal.core import engine
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import GpuStatus
from portal.maintenance.models import RuleState, Silence
from portal.maintenance.rules import AGENT_SILENT, GPU_RULE_LIST, XID_RULES
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
from portal.telemetry.pipeline import Prepared

log = logging.getLogger(__name__)

GPU_INFO_FIELDS = ("id", "host_id", "status", "temp_slowdown_c", "power_limit_default_w", "pcie_link_gen_max",
                   "pcie_link_width_max")  # fmt: skip
STATE_FIELDS = ["state", "since_ts", "last_ts", "peak", "data", "updated_at"]
_TRACK_COLUMNS = ("key", "rule", "host_id", "gpu_id", "state", "since_ts", "last_ts", "peak", "data")


@dataclass
class EvaluationResult:
    readings: int = 0
    events: list[Event] = field(default_factory=list)
    tickets: list = field(default_factory=list)  # (ticket, outcome)
    duplicate: bool = False
    batches: list[int] = field(default_factory=list)  # the batches a pass evaluated


class Tracks:
    """The RuleState rows of some subjects, loaded in one query, written back in two."""

    def __init__(self, *, gpu_ids=(), host_ids=(), keys=()):
        """The states of these GPUs, of these hosts themselves, and these fingerprints."""
        self.by_key: dict[str, Track] = {}
        self.loaded: list[tuple] = []  # (conditions, filters, rows) of every load
        query = Q(gpu_id__in=list(gpu_ids))
        if keys:
            query |= Q(key__in=list(keys))
        if host_ids:
            query |= Q(host_id__in=list(host_ids), gpu__isnull=True)
        if gpu_ids or keys or host_ids:
            self.load(query)

    def load(self, *conditions, **filters) -> Tracks:
        """Add the states matching a query (one query); the one way RuleState rows become tracks."""
        rows = list(RuleState.objects.filter(*conditions, **filters).values_list(*_TRACK_COLUMNS))
        self.loaded.append((conditions, filters, _snapshot(rows)))
        for key, rule, host_id, gpu_id, state, since, last, peak, data in rows:
            since, last = to_epoch(since), to_epoch(last)
            self.by_key[key] = Track(key, rule, host_id, gpu_id, state, since, last, peak, data, obj=True)
        return self

    def unchanged(self) -> bool:
        """Whether the states loaded are still as they were (nobody wrote them, nor added one
        that a load would have found, since): asked again, query by query."""
        return all(
            _snapshot(RuleState.objects.filter(*conditions, **filters).values_list(*_TRACK_COLUMNS)) == snapshot
            for conditions, filters, snapshot in self.loaded
        )

    def get(self, rule: str, host_id: int, gpu_id: int | None) -> Track:
        key = fingerprint(rule, gpu_id=gpu_id, host_id=host_id)
        track = self.by_key.get(key)
        if track is None:
            track = self.by_key[key] = Track(key, rule, host_id, gpu_id)
            track.changed = False  # a new state that stays ok is never written
        return track

    def save(self, now: dt.datetime) -> int:
        """Write back the states that changed: one INSERT … ON CONFLICT DO UPDATE per 500 rows.
        Plain SQL: Django's bulk_create compiles every field of every row, several times slower
        here than the rules themselves, and bulk_update's CASE WHEN is slower still."""
        rows = []
        for track in self.by_key.values():
            if not track.changed:
                continue
            rows.append(track)
            track.changed = False
        if rows:
            _states_upsert(rows, now)
            for track in rows:
                if track.obj is None:
                    track.obj = True  # written: the row exists from now on
        return len(rows)


def _snapshot(rows) -> dict:
    """State rows by key, their data as JSON text: the rules change a track's data in place."""
    return {row[0]: (*row[1:-1], json.dumps(row[-1], sort_keys=True)) for row in rows}


_UPSERT_COLUMNS = ("key", "rule", "host_id", "gpu_id", *STATE_FIELDS)


def _states_upsert(tracks: list[Track], now: dt.datetime, chunk: int = 500) -> None:
    if engine.array_parameters():
        _states_upsert_arrays(tracks, now)
        return
    ops = connection.ops
    table = RuleState._meta.db_table
    row_sql = "(" + ", ".join("%s" for _ in _UPSERT_COLUMNS) + ")"
    updates = ", ".join(f"{c} = excluded.{c}" for c in STATE_FIELDS)
    stamp = ops.adapt_datetimefield_value(now)
    moment = ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        for start in range(0, len(tracks), chunk):
            part = tracks[start : start + chunk]
            params = []
            for t in part:
                params.extend((
                    t.key, t.rule, t.host_id, t.gpu_id, t.state,
                    moment(from_epoch(t.since)), moment(from_epoch(t.last)),
                    t.peak, json.dumps(t.data, separators=(",", ":")), stamp,
                ))  # fmt: skip
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(_UPSERT_COLUMNS)}) VALUES {', '.join([row_sql] * len(part))} "
                f"ON CONFLICT (key) DO UPDATE SET {updates}",
                params,
            )


# PostgreSQL: one column array per parameter, the statement's text the same for any number of rows
# (a VALUES list of thousands of placeholders is parsed again by the client for every statement).
_UPSERT_ARRAYS_SQL = (
    f"INSERT INTO {RuleState._meta.db_table} ({', '.join(_UPSERT_COLUMNS)}) "
    "SELECT k, r, h, g, s, si, la, pe, d::jsonb, %s FROM unnest("
    "%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::timestamptz[], %s::timestamptz[], "
    "%s::float8[], %s::text[]) AS u(k, r, h, g, s, si, la, pe, d) "
    f"ON CONFLICT (key) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in STATE_FIELDS)}"
)


def _states_upsert_arrays(tracks: list[Track], now: dt.datetime) -> None:
    columns = (
        [t.key for t in tracks], [t.rule for t in tracks], [t.host_id for t in tracks], [t.gpu_id for t in tracks],
        [t.state for t in tracks], [from_epoch(t.since) for t in tracks], [from_epoch(t.last) for t in tracks],
        [None if t.peak is None else float(t.peak) for t in tracks],
        [json.dumps(t.data, separators=(",", ":")) for t in tracks],
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT_ARRAYS_SQL, [now, *columns])


def gpu_infos(gpu_ids) -> dict[int, GpuInfo]:
    return {
        row["id"]: GpuInfo(**row)
        for row in fleet_selectors.gpus().filter(pk__in=list(gpu_ids)).values(*GPU_INFO_FIELDS)
    }


class SilenceLookup:
    """Maintenance windows of some hosts, loaded once, asked per event."""

    def __init__(self, host_ids, gpus: dict[int, GpuInfo]):
        self.windows = list(
            Silence.objects.filter(host_id__in=list(host_ids)).values_list("host_id", "gpu_id", "starts_at", "ends_at")
        )
        self.gpus = gpus

    def __call__(self, host_id: int, gpu_id: int | None, at: dt.datetime) -> bool:
        gpu = self.gpus.get(gpu_id) if gpu_id is not None else None
        if gpu is not None and gpu.status == GpuStatus.OUT_FOR_REPAIR:
            return True
        return any(
            h == host_id and (g is None or g == gpu_id) and start <= at < end for h, g, start, end in self.windows
        )


@dataclass
class _Judged:
    """What judging some readings came to, before anything is written (_apply writes it)."""

    result: EvaluationResult
    tracks: Tracks
    gpus: dict[int, GpuInfo]
    host_ids: set[int]


def _judge(*, readings, xids) -> _Judged:
    """Run the rules over the readings: reads rule states, GPUs and thresholds, writes nothing."""
    gpu_ids = sorted(set(readings) | set(xids))
    params = RuleParams()
    gpus = gpu_infos(gpu_ids)
    host_ids = {gpu.host_id for gpu in gpus.values()}
    tracks = Tracks(gpu_ids=gpu_ids, keys=[fingerprint(AGENT_SILENT.key, host_id=h) for h in host_ids])
    result = EvaluationResult()
    emit = result.events.append
    first_by_host: dict[int, float] = {}
    for gpu_id in gpu_ids:
        gpu = gpus.get(gpu_id)
        if gpu is None:
            continue
        rows = readings.get(gpu_id) or []
        if rows:
            rows = [(row[0].timestamp(), *row[1:]) for row in rows]
            result.readings += len(rows)
            first = first_by_host.get(gpu.host_id)
            first_by_host[gpu.host_id] = rows[0][0] if first is None else min(first, rows[0][0])
            for rule in GPU_RULE_LIST:
                enabled, p = params.get(rule.key, gpu.host_id)
                if enabled:
                    rule.evaluate(tracks.get(rule.key, gpu.host_id, gpu_id), gpu, rows, p, emit)
            silent = tracks.by_key.get(fingerprint(AGENT_SILENT.key, gpu_id=gpu_id))
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
    for host, first in first_by_host.items():
        host_silent = tracks.by_key.get(fingerprint(AGENT_SILENT.key, host_id=host))
        if host_silent is not None and host_silent.state != OK:
            host_silent.state, host_silent.since, host_silent.changed = OK, None, True
            emit(Event("clear", host_silent, first))
    return _Judged(result, tracks, gpus, host_ids)


def _apply(judged: _Judged, now: dt.datetime) -> EvaluationResult:
    """Write what _judge came to: the states that moved, and the tickets their events make."""
    judged.tracks.save(now)
    silenced = SilenceLookup(judged.host_ids, judged.gpus)
    judged.result.tickets = events_apply(judged.result.events, silenced=silenced)
    return judged.result


def events_apply(events: list[Event], *, silenced) -> list:
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
                rule=track.rule, host_id=track.host_id, gpu_id=track.gpu_id, at=at
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
        if (rule, host_id) in seen or rule == AGENT_SILENT.key:
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


def rules_prepare(block) -> Prepared:
    """The rules stage (telemetry.pipeline): judge a block of stored batches (reads only); the
    pass writes the states that moved and the tickets in its transaction. If a state it read was
    written meanwhile (a maintenance record, a beat check), the pass judges again."""
    judged = _judge(readings=block.columns(READING_COLUMNS), xids=block.xids)
    return Prepared(apply=lambda: _apply(judged, timezone.now()), current=judged.tracks.unchanged)
