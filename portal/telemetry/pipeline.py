"""The one pipeline after ingest: every stored batch handed once to every stage.

A stage (rules, rollups, wear, and whatever subscribes later) works on a block of stored batches
whose readings are already read, in one query, for every stage of a pass. It subscribes to
`telemetry.hooks.pipeline_stages` (in its app's `AppConfig.ready()`) with a `prepare(block)` that
only reads and computes, and returns what to write; the pass then writes it in a transaction together with the
stage's rows of the ledger (`StageDone`; read in ledger.py), so a batch counts as finished by a stage exactly when
the stage's effects are committed. A crash anywhere leaves the batch pending for that stage only,
and the next pass does that stage's work once.

One pass runs at a time in the cluster (portal.core.locks): passes never judge one GPU's batches
out of order or overwrite each other's work. Preparing outside the transaction keeps SQLite's
write lock (taken at BEGIN) short; if what a stage read has changed by the time it writes
(`current()` says), it prepares again inside the transaction.

Work arrives through one trigger: ingest hands each stored batch on after commit
(telemetry.hooks), which sends the pipeline task at most once per PIPELINE_DEBOUNCE_S per process;
beat's sweep runs the same passes for anything a failed send left, and folds the ledger into its
cursor.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Count, Max, Min
from django.utils import timezone

from portal.core.locks import pass_lock
from portal.fleet import selectors as fleet_selectors
from portal.telemetry import hooks, ledger, store
from portal.telemetry.columns import READING_ROW_COLUMNS, ReadingColumns, tuple_picker
from portal.telemetry.models import IngestBatch, PipelineCursor, StageDone, XidEvent

log = logging.getLogger(__name__)

PASS_BATCHES = 500  # batches one pass takes at most
# A pass looks for pending batches from this many ids below the newest one finished (batches
# commit in about id order, so this covers the ones in flight); the sweep looks from the cursor.
CLAIM_SLACK = 1000
# The cursor never passes a batch received less than this long ago: a batch that was given its id
# before others may commit after them.
IN_FLIGHT = dt.timedelta(minutes=2)
LAGGING_AFTER_S = 60.0  # the fleet page tells an admin from here on


@dataclass(frozen=True)
class StoredBatch:
    pk: int
    host_id: int
    received_at: dt.datetime
    first_ts: dt.datetime | None
    last_ts: dt.datetime | None
    reading_count: int


@dataclass
class Block:
    """Some stored batches and their readings, read once and handed to every stage.

    `readings`: GPU id → stored rows (READING_ROW_COLUMNS order), in time order. A batch's readings
    are its host's readings within its time span. `xids`: GPU id → (epoch s, code) of the batches'
    XID events."""

    batches: list[StoredBatch]
    readings: dict[int, list[tuple]]
    xids: dict[int, list[tuple[float, int]]]
    gpu_hosts: dict[int, int]
    _xid_batches: dict[int, list[tuple[int, float, int]]] = field(default_factory=dict)

    def columns(self, names: tuple[str, ...]) -> dict[int, list[tuple]]:
        """The readings as tuples of these reading columns (a reader's own order)."""
        if names == READING_ROW_COLUMNS:
            return self.readings
        pick = tuple_picker(ReadingColumns(*names).from_row)
        return {gpu_id: list(map(pick, rows)) for gpu_id, rows in self.readings.items()}

    def only(self, batch_pks: set[int]) -> Block:
        """The part of this block that belongs to some of its batches."""
        batches = [batch for batch in self.batches if batch.pk in batch_pks]
        spans = _host_spans(batches)
        readings = {}
        for gpu_id, rows in self.readings.items():
            host_spans = spans.get(self.gpu_hosts.get(gpu_id), ())
            kept = [row for row in rows if any(lo <= row[1] <= hi for lo, hi in host_spans)]
            if kept:
                readings[gpu_id] = kept
        xids: dict[int, list] = defaultdict(list)
        for batch_pk, events in self._xid_batches.items():
            if batch_pk in batch_pks:
                for gpu_id, ts, code in events:
                    xids[gpu_id].append((ts, code))
        return Block(batches, readings, dict(xids), self.gpu_hosts, {
            pk: events for pk, events in self._xid_batches.items() if pk in batch_pks
        })  # fmt: skip

    @property
    def reading_total(self) -> int:
        return sum(len(rows) for rows in self.readings.values())


@dataclass
class Prepared:
    """What a stage will write: `apply()` runs in the pass's transaction; `current()` says whether
    what the stage read is still as it was (False: it prepares again, inside the transaction)."""

    apply: Callable[[], object]
    current: Callable[[], bool] = lambda: True


@dataclass(frozen=True)
class Stage:
    name: str
    prepare: Callable[[Block], Prepared]
    order: int


def stages() -> list[Stage]:
    """The stages subscribed to telemetry.hooks.pipeline_stages, in the order a pass runs them."""
    return [Stage(entry.name, entry.function, entry.order) for entry in hooks.pipeline_stages]


# --- the ledger ---------------------------------------------------------------------------------


def _claim_floor(*, sweep: bool) -> int:
    cursor = ledger.cursor()
    if sweep:
        return cursor
    newest = StageDone.objects.aggregate(newest=Max("batch_pk"))["newest"] or 0
    return max(cursor, newest - CLAIM_SLACK)


_BATCH_FIELDS = ("pk", "host_id", "received_at", "first_ts", "last_ts", "reading_count")


def _pending(names: list[str], *, limit: int, sweep: bool) -> list[StoredBatch]:
    query = ledger.pending_query(names, floor=_claim_floor(sweep=sweep)).order_by("pk").values_list(*_BATCH_FIELDS)
    return [StoredBatch(*row) for row in query[:limit]]


def _done(name: str, batch_pks: list[int]) -> set[int]:
    return set(StageDone.objects.filter(stage=name, batch_pk__in=batch_pks).values_list("batch_pk", flat=True))


def _mark(name: str, batch_pks: list[int]) -> None:
    StageDone.objects.bulk_create([StageDone(stage=name, batch_pk=pk) for pk in batch_pks], batch_size=1000)


def ledger_compact(*, now: dt.datetime | None = None) -> int:
    """Fold the ledger's rows into the cursor: it moves up to the first batch some stage has not
    finished, never past a batch received within IN_FLIGHT. Returns the cursor."""
    now = now or timezone.now()
    cursor = ledger.cursor()
    limit = IngestBatch.objects.filter(received_at__lt=now - IN_FLIGHT, pk__gte=cursor).aggregate(top=Max("pk"))["top"]
    if limit is None:
        return cursor
    limit += 1
    unfinished = ledger.pending_query([stage.name for stage in stages()], floor=cursor).filter(pk__lt=limit)
    first = unfinished.aggregate(first=Min("pk"))["first"]
    moved = min(limit, first) if first is not None else limit
    if moved > cursor:
        with transaction.atomic():
            updated = PipelineCursor.objects.update(done_below=moved)
            if not updated:
                PipelineCursor.objects.create(done_below=moved)
            StageDone.objects.filter(batch_pk__lt=moved).delete()
    return max(moved, cursor)


# --- reading a block ----------------------------------------------------------------------------


def _host_spans(batches: list[StoredBatch]) -> dict[int, list[tuple[dt.datetime, dt.datetime]]]:
    spans: dict[int, list] = defaultdict(list)
    for batch in batches:
        if batch.first_ts is not None:
            spans[batch.host_id].append((batch.first_ts, batch.last_ts))
    merged = {}
    for host_id, host_spans in spans.items():
        out: list[tuple[dt.datetime, dt.datetime]] = []
        for start, end in sorted(host_spans):
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            else:
                out.append((start, end))
        merged[host_id] = out
    return merged


def block_read(batches: list[StoredBatch]) -> Block:
    """The readings and XID events of these batches: one query for the readings (per 100 host
    spans: SQLite limits an expression's depth), one for the events, one for their hosts' GPUs."""
    spans = _host_spans(batches)
    gpus = fleet_selectors.gpus().filter(host_id__in=list(spans))
    gpu_hosts = dict(gpus.values_list("id", "host_id")) if spans else {}
    gpus_by_host: dict[int, list[int]] = defaultdict(list)
    for gpu_id, host_id in gpu_hosts.items():
        gpus_by_host[host_id].append(gpu_id)
    periods = [
        (gpus_by_host[host_id], start, end)
        for host_id, host_spans in spans.items()
        if gpus_by_host[host_id]
        for start, end in host_spans
    ]
    readings: dict[int, list[tuple]] = defaultdict(list)
    for row in store.readings_in_spans(spans=periods, columns=READING_ROW_COLUMNS):
        readings[row[0]].append(row)
    for rows in readings.values():
        rows.sort(key=lambda row: row[1])
    xids: dict[int, list] = defaultdict(list)
    by_batch: dict[int, list] = defaultdict(list)
    events = XidEvent.objects.filter(batch_id__in=[batch.pk for batch in batches]).values_list(
        "batch_id", "gpu_id", "ts", "code"
    )
    for batch_pk, gpu_id, ts, code in events:
        xids[gpu_id].append((ts.timestamp(), code))
        by_batch[batch_pk].append((gpu_id, ts.timestamp(), code))
    return Block(batches, dict(readings), dict(xids), gpu_hosts, dict(by_batch))


# --- passes -------------------------------------------------------------------------------------


@dataclass
class PassResult:
    batches: list[int] = field(default_factory=list)  # the batches the pass looked at
    readings: int = 0
    finished: dict[str, int] = field(default_factory=dict)  # stage → batches it finished
    failed: list[str] = field(default_factory=list)  # stages that raised (their batches wait)
    busy: bool = False  # another process held the pass lock
    seconds: dict[str, float] = field(default_factory=dict)  # stage → wall time (prepare, apply, ledger)

    def add(self, other: PassResult) -> None:
        self.batches += other.batches
        self.readings += other.readings
        for name, count in other.finished.items():
            self.finished[name] = self.finished.get(name, 0) + count
        self.failed += other.failed
        self.busy = self.busy or other.busy
        for name, seconds in other.seconds.items():
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @property
    def progress(self) -> bool:
        return any(self.finished.values())


def _one_pass(*, limit: int, sweep: bool) -> PassResult:
    active = stages()
    batches = _pending([stage.name for stage in active], limit=limit, sweep=sweep)
    result = PassResult(batches=[batch.pk for batch in batches])
    if not batches:
        return result
    block = block_read(batches)
    result.readings = block.reading_total
    pks = [batch.pk for batch in batches]
    for stage in active:
        done = _done(stage.name, pks)
        todo = [pk for pk in pks if pk not in done]
        if not todo:
            continue
        part = block if len(todo) == len(pks) else block.only(set(todo))
        began = time.perf_counter()
        try:
            prepared = stage.prepare(part)
            with transaction.atomic():
                if not prepared.current():
                    prepared = stage.prepare(part)
                prepared.apply()
                _mark(stage.name, todo)
        except Exception:
            log.exception("pipeline stage %s failed on batches %s..%s; they wait for the next pass", stage.name,
                          todo[0], todo[-1])  # fmt: skip
            result.failed.append(stage.name)
            continue
        result.finished[stage.name] = len(todo)
        result.seconds[stage.name] = time.perf_counter() - began
    return result


def pipeline_run(*, limit: int = PASS_BATCHES, sweep: bool = False) -> PassResult:
    """Run passes until no stage has a pending batch (or no pass makes progress: a failing stage's
    batches wait for the next run). A process that finds another one running returns at once: the
    other looks again after it lets go, so nothing stored meanwhile waits for the sweep."""
    total = PassResult()
    while True:
        with pass_lock("pipeline") as held:
            if not held:
                total.busy = True
                return total
            while True:
                passed = _one_pass(limit=limit, sweep=sweep)
                total.add(passed)
                if len(passed.batches) < limit or not passed.progress:
                    break
        if not passed.progress or not _pending([s.name for s in stages()], limit=1, sweep=sweep):
            return total


def pipeline_sweep(*, now: dt.datetime | None = None) -> PassResult:
    """Beat's run: every pending batch from the cursor up (what no triggered run reached), then
    the ledger folded into its cursor."""
    result = pipeline_run(sweep=True)
    if not result.busy:
        ledger_compact(now=now)
    return result


# --- status -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageStatus:
    name: str
    backlog_batches: int
    oldest_pending_at: dt.datetime | None
    lag_seconds: float | None


def pipeline_status(*, now: dt.datetime | None = None) -> list[StageStatus]:
    """Every registered stage, by name (portal-api-v1.md, "Pipeline status"): one query each."""
    now = now or timezone.now()
    floor = ledger.cursor()
    out = []
    for name in sorted(ledger.stage_names()):
        figures = IngestBatch.objects.filter(ledger.not_done(name), pk__gte=floor).aggregate(
            batches=Count("pk"), oldest=Min("received_at")
        )
        oldest = figures["oldest"] if figures["batches"] else None
        lag = max(0.0, (now - oldest).total_seconds()) if oldest is not None else None
        out.append(StageStatus(name, figures["batches"], oldest, lag))
    return out


def pipeline_lagging(*, now: dt.datetime | None = None) -> list[StageStatus]:
    """The stages whose oldest pending batch was stored more than LAGGING_AFTER_S ago."""
    return [stage for stage in pipeline_status(now=now) if (stage.lag_seconds or 0) > LAGGING_AFTER_S]
