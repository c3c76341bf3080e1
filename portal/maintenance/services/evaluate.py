"""The anomaly engine: judge stored batches of readings against every rule, move rule states, and
turn the resulting events into tickets.

Work comes in passes. A pass claims every stored batch not yet evaluated (up to PASS_BATCHES),
whichever batch's task started it, and judges them together: one query for their readings, one
for their XID events, one for the rule states of all their GPUs, one for the GPUs, one for the
thresholds; then Python over the readings, GPU by GPU in reading-time order; then one upsert of
the states that changed. Ticket work happens only when a rule fires or clears, which is rare. The
fixed cost is paid once per pass, so a worker that falls behind catches up in big, cheap passes.

One pass runs at a time (a PostgreSQL advisory lock; SQLite's IMMEDIATE transactions serialise
writers anyway): two passes side by side could judge consecutive batches of one GPU out of order
and overwrite each other's rule states. A BatchEvaluation row per batch, written in the pass's
transaction, marks it done, so the same batch twice changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, Max, OuterRef, Q
from django.utils import timezone

from portal.core.sqlite import reads_outside_write_lock, serialized
from portal.fleet.models import Gpu
from portal.maintenance.models import BatchEvaluation, RuleState, Silence
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
from portal.telemetry.models import IngestBatch, Reading, XidEvent

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
    ops = connection.ops
    table = RuleState._meta.db_table
    json_value = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    row_sql = "(" + ", ".join(json_value if c == "data" else "%s" for c in _UPSERT_COLUMNS) + ")"
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
    readings: dict[int, list[tuple]],
    xids: dict[int, list[tuple[float, int]]] | None = None,
    now: dt.datetime | None = None,
    params: RuleParams | None = None,
    gpu_ids=None,
    host_id: int | None = None,
) -> EvaluationResult:
    """Judge readings (tuples in READING_COLUMNS order, ts as aware datetimes, sorted by ts per
    GPU) of any GPUs, of one host or many. Call inside a transaction."""
    now = now or timezone.now()
    judged = _judge(readings=readings, xids=xids, params=params, gpu_ids=gpu_ids, host_id=host_id)
    return _apply(judged, now)


@dataclass
class _Judged:
    """What judging some readings came to, before anything is written (_apply writes it)."""

    result: EvaluationResult
    tracks: Tracks
    gpus: dict[int, GpuInfo]
    host_ids: set[int]
    params: RuleParams


def _judge(*, readings, xids=None, params=None, gpu_ids=None, host_id=None) -> _Judged:
    """Run the rules over the readings: reads rule states, GPUs and thresholds, writes nothing."""
    xids = xids or {}
    gpu_ids = sorted(set(gpu_ids or ()) | set(readings) | set(xids))
    params = params or RuleParams()
    gpus = _gpu_infos(gpu_ids)
    host_ids = {gpu.host_id for gpu in gpus.values()} | ({host_id} if host_id is not None else set())
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
    return _Judged(result, tracks, gpus, host_ids, params)


def _apply(judged: _Judged, now: dt.datetime) -> EvaluationResult:
    """Write what _judge came to: the states that moved, and the tickets their events make."""
    judged.tracks.save(now)
    silenced = SilenceLookup(judged.host_ids, judged.gpus)
    judged.result.tickets = events_apply(judged.result.events, silenced=silenced, params=judged.params)
    return judged.result


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


PASS_BATCHES = 500  # batches claimed by one pass at most
# How far below the newest evaluated batch a pass looks for batches still pending. Ids are given
# out at insert and batches commit in about that order, so this only needs to cover the batches
# in flight; older stragglers (none unless a pass was rolled back) are the sweep's.
CLAIM_SLACK = 1000
SWEEP_WINDOW = dt.timedelta(hours=24)  # by arrival (received_at), so late readings are swept too
_LOCK_KEY = 0x6D61696E  # "main": the advisory lock that keeps one pass at a time (PostgreSQL)


def _pass_lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def _claim(*, limit: int, since: dt.datetime | None) -> list[dict]:
    """Pending batches, oldest first, marked done (in the caller's transaction)."""
    pending = _pending(limit=limit, since=since)
    _mark(pending)
    return pending


def _mark(batches: list[dict]) -> None:
    if batches:
        BatchEvaluation.objects.bulk_create(
            [BatchEvaluation(batch_pk=b["id"], readings=b["reading_count"]) for b in batches], batch_size=500
        )


def _pending(*, limit: int, since: dt.datetime | None) -> list[dict]:
    """Batches not evaluated yet, oldest first (up to limit)."""
    batches = IngestBatch.objects.order_by("id")
    if since is not None:
        batches = batches.filter(received_at__gte=since)
    else:
        newest = BatchEvaluation.objects.aggregate(newest=Max("batch_pk"))["newest"] or 0
        batches = batches.filter(id__gt=max(0, newest - CLAIM_SLACK))
    done = BatchEvaluation.objects.filter(batch_pk=OuterRef("id"))
    columns = ("id", "host_id", "first_ts", "last_ts", "reading_count")
    return list(batches.filter(~Exists(done)).values(*columns)[:limit])


def _merged(spans: list[tuple[dt.datetime, dt.datetime]]) -> list[tuple[dt.datetime, dt.datetime]]:
    merged: list[tuple[dt.datetime, dt.datetime]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _batch_readings(batches: list[dict]) -> dict[int, list[tuple]]:
    """The readings of some batches, per GPU in time order. A batch's readings are its host's
    readings within its time span; overlapping spans of one host are read once."""
    spans: dict[int, list] = defaultdict(list)
    for batch in batches:
        if batch["first_ts"] is not None:
            spans[batch["host_id"]].append((batch["first_ts"], batch["last_ts"]))
    if not spans:
        return {}
    gpus_by_host: dict[int, list[int]] = defaultdict(list)
    for gpu_id, host_id in Gpu.objects.filter(host_id__in=list(spans)).values_list("id", "host_id"):
        gpus_by_host[host_id].append(gpu_id)
    clauses = [
        Q(gpu_id__in=gpus_by_host[host_id], ts__gte=start, ts__lte=end)
        for host_id, host_spans in spans.items()
        if gpus_by_host[host_id]
        for start, end in _merged(host_spans)
    ]
    readings: dict[int, list[tuple]] = defaultdict(list)
    for part in range(0, len(clauses), 100):  # SQLite limits the depth of one expression
        condition = Q()
        for clause in clauses[part : part + 100]:
            condition |= clause
        for row in Reading.objects.filter(condition).values_list("gpu_id", *READING_COLUMNS):
            readings[row[0]].append(row[1:])
    for rows in readings.values():
        rows.sort(key=lambda row: row[0])
    return readings


def batches_evaluate_pending(
    *, now: dt.datetime | None = None, limit: int = PASS_BATCHES, since: dt.datetime | None = None
) -> EvaluationResult:
    """One pass: claim the batches not yet evaluated (up to `limit`, oldest first) and judge them
    together. `since`: look at every batch received since then (the sweep), not only the recent
    ids. Returns what the pass did; `batches` holds the ids it evaluated.

    On SQLite (outside a caller's transaction) the pass reads and judges before it takes the
    write lock, and holds it only to write: passes run one at a time (portal.core.sqlite), and
    if anything else wrote the rule states it read meanwhile (a maintenance record, a beat
    check), it judges again under the lock."""
    now = now or timezone.now()
    if reads_outside_write_lock():
        with serialized("evaluate"):
            batches = _pending(limit=limit, since=since)
            if not batches:
                return EvaluationResult()
            judged = _judge_batches(batches)
            with transaction.atomic():
                if not judged.tracks.unchanged():
                    batches = _pending(limit=limit, since=since)
                    judged = _judge_batches(batches)
                _mark(batches)
                result = _apply(judged, now)
                result.batches = [batch["id"] for batch in batches]
                return result
    with transaction.atomic():
        _pass_lock()
        batches = _claim(limit=limit, since=since)
        if not batches:
            return EvaluationResult()
        result = _apply(_judge_batches(batches), now)
        result.batches = [batch["id"] for batch in batches]
        return result


def _judge_batches(batches: list[dict]) -> _Judged:
    xids: dict[int, list] = defaultdict(list)
    rows = XidEvent.objects.filter(batch_id__in=[batch["id"] for batch in batches]).values_list("gpu_id", "ts", "code")
    for gpu_id, ts, code in rows:
        xids[gpu_id].append((ts.timestamp(), code))
    return _judge(readings=_batch_readings(batches), xids=xids)


def batch_evaluate(*, batch_pk: int, gpu_ids: list[int] | None = None, now: dt.datetime | None = None):
    """Make sure one stored batch is evaluated (the Celery task's service). Idempotent: a batch
    already evaluated (by its own task or by a pass another batch's task ran) is a duplicate.
    Otherwise runs passes, each taking every pending batch, until this one is done. `gpu_ids`
    is accepted for the tasks already queued; a pass reads each batch's host's GPUs."""
    result = EvaluationResult()
    for _ in range(100):
        if not IngestBatch.objects.filter(pk=batch_pk).exists():
            return result
        if BatchEvaluation.objects.filter(batch_pk=batch_pk).exists():
            result.duplicate = not result.batches
            return result
        passed = batches_evaluate_pending(now=now)
        if not passed.batches:
            # Below the claim window (a straggler): the sweep's wider look finds it.
            passed = batches_evaluate_pending(now=now, since=(now or timezone.now()) - SWEEP_WINDOW)
            if not passed.batches:
                return result
        result.readings += passed.readings
        result.events += passed.events
        result.tickets += passed.tickets
        result.batches += passed.batches
    return result


def evaluation_backlog(*, now: dt.datetime):
    """The rules stage's batches not yet evaluated (telemetry.pipeline): those a pass looks at (ids
    from CLAIM_SLACK below the newest evaluated one) without a marker. A batch's marker is written
    in the transaction that applies its evaluation and kept for 2 × SWEEP_WINDOW (batches_sweep),
    so within that window a batch without one is not finished. When evaluation stops, every batch
    stored since counts; a straggler below the window (a pass rolled back) is the sweep's and is
    not counted, which keeps this one small query however many batches the window holds."""
    from portal.telemetry.pipeline import backlog_of

    newest = BatchEvaluation.objects.aggregate(newest=Max("batch_pk"))["newest"] or 0
    done = BatchEvaluation.objects.filter(batch_pk=OuterRef("id"))
    pending = IngestBatch.objects.filter(id__gt=max(0, newest - CLAIM_SLACK), received_at__gte=now - 2 * SWEEP_WINDOW)
    return backlog_of(pending.filter(~Exists(done)))


def batches_sweep(*, now: dt.datetime | None = None) -> EvaluationResult:
    """The beat task's service: evaluate what no task did (the broker was down when the batch
    was stored, or a pass failed), then forget markers of batches long past both windows."""
    now = now or timezone.now()
    result = EvaluationResult()
    while True:
        passed = batches_evaluate_pending(now=now, since=now - SWEEP_WINDOW)
        result.readings += passed.readings
        result.batches += passed.batches
        if len(passed.batches) < PASS_BATCHES:
            break
    newest = BatchEvaluation.objects.aggregate(newest=Max("batch_pk"))["newest"] or 0
    BatchEvaluation.objects.filter(evaluated_at__lt=now - 2 * SWEEP_WINDOW, batch_pk__lt=newest - CLAIM_SLACK).delete()
    return result
