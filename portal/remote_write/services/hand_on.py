"""Pending readings and their hand-on to ingest (prometheus-v1.md).

What a write stores is one pending row per GPU and timestamp (its samples' values one JSON object
by field), not one per sample: a part that arrives in a later request is merged into the row, a
field already stored is never changed, and a request sent again stores nothing new. A reading is
complete when a later reading of its GPU has arrived holding every field the GPU's readings have,
or two scrape intervals after its first part arrived; readings of a GPU go on in time order, so no
rule ever judges half a reading. Complete readings are handed on in bulk, one batch per host, as
an ingest-v1 batch stored by the agents' own path (reading_batch_ingest: the same bulk insert, the
same pipeline after it), its readings built as the Reading structs ingest's fast path reads, from
values held to each field's rules when they were stored (mapping.value_usable), its host entry
and inventory checked as an agent's (ingest_fast.batch_of_readings).

Both the write (for the readings its samples complete, in its own transaction) and the pass (for
readings completed by waiting) settle a host's GPUs the same way (`_settle`), with the GPUs' rows
locked (PostgreSQL) or the write lock held (SQLite), so that a reading goes on exactly once.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import uuid as uuid_module
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from pydantic import ValidationError

from portal.core.errors import ApplicationError, Forbidden
from portal.core.locks import pass_lock
from portal.remote_write import mapping
from portal.remote_write.models import FedHost, IngestSource, PendingReading, SourceGpu
from portal.telemetry.ingest_fast import Reading, XidEvent, batch_of_readings
from portal.telemetry.metrics import REMAPPED_ROWS_PENDING
from portal.telemetry.selectors import throttle_names
from portal.telemetry.services.ingest import reading_batch_ingest

if TYPE_CHECKING:
    from portal.fleet.models import Host

log = logging.getLogger(__name__)

_NAMESPACE = uuid_module.UUID("6d1c0c4e-5a0f-4b7e-9a55-7265d0746577")
# Prometheus's queue sends a shard's batch up to batch_send_deadline (5 s by default) after its
# first sample, and shards send independently: the parts of one scrape may arrive that far apart
# however short the scrape interval. A reading no later one completes waits at least this long.
MIN_WAIT_S = 10.0
MAX_PENDING_ROWS = 100_000  # a pass reads at most this many pending readings; the next pass takes the rest


@dataclass(slots=True)
class Pending:
    """One GPU's samples at one timestamp: as stored (row_id), and what this transaction added."""

    ts: dt.datetime
    values: dict[str, float]
    jobs: str | None  # JSON list of job keys from the series' labels; None: no job labels
    first_received: dt.datetime
    row_id: int | None = None
    changed: bool = False


# A GPU's pending readings by timestamp.
GpuPending = dict[dt.datetime, Pending]


@dataclass
class HandOnResult:
    readings: int = 0
    skipped: int = 0  # samples
    dropped: int = 0  # samples
    left: int = 0  # complete readings a write could not hand on: the pass's to try

    def add(self, other: HandOnResult) -> None:
        self.readings += other.readings
        self.skipped += other.skipped
        self.dropped += other.dropped
        self.left += other.left


@dataclass
class GpuWork:
    gpu: SourceGpu
    pending: GpuPending
    late: list[Pending] = field(default_factory=list)
    complete: list[Pending] = field(default_factory=list)


def _instant_reader():
    """Stored times to aware datetimes, each distinct one once (psycopg gives datetimes, sqlite3
    Django's text, whose parsing through the ORM was most of a pass's CPU)."""
    seen: dict = {}

    def instant(value) -> dt.datetime:
        moment = seen.get(value)
        if moment is None:
            moment = value if isinstance(value, dt.datetime) else parse_datetime(value)
            if timezone.is_naive(moment):
                moment = moment.replace(tzinfo=dt.UTC)  # stored in UTC (USE_TZ)
            seen[value] = moment
        return moment

    return instant


@functools.cache
def _table() -> str:
    return connection.ops.quote_name(PendingReading._meta.db_table)


def pending_read(gpu_ids=None, *, limit: int = MAX_PENDING_ROWS) -> dict[int, GpuPending]:
    """The stored pending readings of these GPUs (None: of every GPU, up to limit), by GPU."""
    sql = f"SELECT id, gpu_id, ts, samples, jobs, received_at FROM {_table()}"
    params: list = []
    if gpu_ids is not None:
        gpu_ids = list(gpu_ids)
        if not gpu_ids:
            return {}
        sql += f" WHERE gpu_id IN ({', '.join(['%s'] * len(gpu_ids))})"
        params.extend(gpu_ids)
    sql += " ORDER BY gpu_id, ts LIMIT %s"
    params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    instant = _instant_reader()
    by_gpu: dict[int, GpuPending] = defaultdict(dict)
    for row_id, gpu_id, raw_ts, values, jobs, received in rows:
        ts = instant(raw_ts)
        by_gpu[gpu_id][ts] = Pending(ts, orjson.loads(values), jobs, instant(received), row_id)
    return by_gpu


def _scrape_interval(gpu: SourceGpu, waiting: list[Pending]) -> float:
    """Seconds between the GPU's scrapes: between its last two readings handed on, else the
    smallest gap between those waiting (its first readings), else the setting."""
    if gpu.interval_s:
        return gpu.interval_s
    gaps = [(b.ts - a.ts).total_seconds() for a, b in zip(waiting, waiting[1:], strict=False)]
    return min((gap for gap in gaps if gap > 0), default=settings.REMOTE_WRITE_SCRAPE_INTERVAL_S)


def _complete(gpu: SourceGpu, pending: GpuPending, now: dt.datetime) -> tuple[list[Pending], list[Pending]]:
    """(late, complete): readings at or before the newest one handed on, and the readings to hand
    on now, oldest first, up to the first one still waiting."""
    readings = sorted(pending.values(), key=lambda p: p.ts)
    handed = gpu.handed_until
    late = [p for p in readings if handed is not None and p.ts <= handed]
    waiting = readings[len(late) :] if handed is not None else readings
    expected = set(gpu.fields.split(",")) if gpu.fields else None
    wait = dt.timedelta(seconds=max(2 * _scrape_interval(gpu, waiting), MIN_WAIT_S))
    complete = []
    for position, one in enumerate(waiting):
        later = position < len(waiting) - 1
        if now - one.first_received >= wait or (later and expected is not None and expected <= one.values.keys()):
            complete.append(one)
        else:
            break
    return late, complete


# How a stored value becomes its reading field (the XID and remapped-rows counters apart), and
# where it goes among the arguments of ingest_fast.Reading (its metrics, in the registry's order).
_BOOL, _MASK, _FLOAT, _INT = range(4)
_KINDS = {
    **dict.fromkeys(mapping.BOOL_FIELDS, _BOOL), **dict.fromkeys(mapping.MASK_FIELDS, _MASK),
    **dict.fromkeys(mapping.FLOAT_FIELDS, _FLOAT),
}  # fmt: skip
_names = functools.lru_cache(maxsize=4096)(throttle_names)  # a GPU's masks repeat
_METRIC_NAMES = Reading.__struct_fields__[2:-2]  # gpu_uuid, ts, the metrics, xid_events, jobs
assert Reading.__struct_fields__[-2:] == ("xid_events", "jobs")
_SLOT = {name: position for position, name in enumerate(_METRIC_NAMES)}
_PLAN = {
    name: (_SLOT[name], _KINDS.get(name, _INT))
    for name in mapping.SERIES_FIELDS.values() if name not in (mapping.XID_RAW, mapping.REMAPPED_RAW)
}  # fmt: skip
_REMAPPED_SLOT = _SLOT[REMAPPED_ROWS_PENDING.name]
_NO_METRICS = [None] * len(_METRIC_NAMES)


@functools.lru_cache(maxsize=4096)  # a GPU's jobs repeat from reading to reading
def _jobs(raw: str) -> tuple[str, ...]:
    """A pending reading's jobs (JSON) as the reading's tuple."""
    return tuple(orjson.loads(raw))


def _reading(gpu: SourceGpu, pending: Pending) -> Reading:
    """The ingest-v1 reading of one GPU's samples at one timestamp (fields without a series: null),
    built as the struct ingest's fast path reads: every value was held to its field's rules when
    it was stored (mapping.value_usable), and is converted here to the field's type. Moves the
    GPU's XID and remapped-rows baselines on."""
    metrics = _NO_METRICS.copy()
    events = ()
    for name, value in pending.values.items():
        plan = _PLAN.get(name)
        if plan is not None:
            slot, kind = plan
            if kind == _FLOAT:
                metrics[slot] = value
            elif kind == _INT:
                metrics[slot] = round(value)
            elif kind == _BOOL:
                metrics[slot] = value != 0
            else:
                metrics[slot] = list(_names(int(value)))
        elif name == mapping.XID_RAW:
            if gpu.xid_last is not None and value != gpu.xid_last and value != 0:
                events = (XidEvent(pending.ts, int(value)),)
            gpu.xid_last = value
        elif name == mapping.REMAPPED_RAW:
            metrics[_REMAPPED_SLOT] = gpu.remapped_last is not None and value > gpu.remapped_last
            gpu.remapped_last = value
    jobs = None if pending.jobs is None else _jobs(pending.jobs)
    return Reading(gpu.uuid, pending.ts, *metrics, events, jobs)


def _batch(fed_host: FedHost, gpus: list[SourceGpu], readings: list[Reading], now: dt.datetime):
    """The readings as an ingest-v1 batch (ingest_fast.batch_of_readings: the readings as built,
    the host entry and inventory checked as an agent's are)."""
    key = ",".join(f"{reading.gpu_uuid}@{reading.ts.isoformat()}" for reading in readings)
    inventory = [
        {"uuid": gpu.uuid, "index": gpu.index, "name": gpu.name or None, "pci_bus_id": gpu.pci_bus_id or None}
        for gpu in gpus
        if gpu.index is not None
    ]
    return batch_of_readings(
        batch_id=uuid_module.uuid5(_NAMESPACE, f"{fed_host.host_id}|{key}"), sent_at=now,
        host={"hostname": fed_host.host.hostname, "driver_version": fed_host.driver_version or None},
        gpus=inventory, readings=readings,
    )  # fmt: skip


_STATE = ("handed_until", "xid_last", "remapped_last", "fields", "interval_s")


def _ingest(fed_host: FedHost, host: Host, work: list[GpuWork], now: dt.datetime) -> int:
    """Hand the complete readings of these GPUs on as one batch, in a savepoint; moves each GPU's
    state on. ApplicationError or ValidationError when ingest refuses them: nothing stored, the
    GPUs' state as it was."""
    stored_state = [(one.gpu, [getattr(one.gpu, name) for name in _STATE]) for one in work]
    readings = []
    try:
        for one in work:
            gpu, complete = one.gpu, one.complete
            if not complete:
                continue
            readings.extend(_reading(gpu, pending) for pending in complete)
            newest, previous = complete[-1].ts, complete[-2].ts if len(complete) > 1 else gpu.handed_until
            if previous is not None and newest > previous:
                gpu.interval_s = (newest - previous).total_seconds()
            gpu.handed_until = newest
            gpu.fields = ",".join(sorted(complete[-1].values))
        if readings:
            batch = _batch(fed_host, [one.gpu for one in work], readings, now)
            with transaction.atomic():
                reading_batch_ingest(host=host, batch=batch, now=now)
    except (ApplicationError, ValidationError):
        for gpu, values in stored_state:  # forming the readings moved the baselines on: back as stored
            for name, value in zip(_STATE, values, strict=True):
                setattr(gpu, name, value)
        raise
    return len(readings)


@functools.cache
def _sql() -> dict[str, str]:
    gpu_table = connection.ops.quote_name(SourceGpu._meta.db_table)
    return {
        "insert": f"INSERT INTO {_table()} (gpu_id, ts, samples, jobs, received_at) VALUES (%s, %s, %s, %s, %s)",
        "update": f"UPDATE {_table()} SET samples = %s, jobs = %s WHERE id = %s",
        "delete": f"DELETE FROM {_table()} WHERE id = %s",
        "state": f"UPDATE {gpu_table} SET {', '.join(f'{name} = %s' for name in _STATE)} WHERE id = %s",
    }


def _pending_write(work: list[GpuWork], handed: bool) -> None:
    """Store what changed: the readings handed on (and late ones) deleted, new ones inserted,
    merged ones updated; the GPUs' state. Prepared statements run by executemany: the ORM's
    per-object work was most of a write's CPU."""
    adapt = connection.ops.adapt_datetimefield_value
    inserts, updates, deletes, states = [], [], [], []
    for one in work:
        gone = {id(p) for p in one.late} | ({id(p) for p in one.complete} if handed else set())
        for pending in one.pending.values():
            if id(pending) in gone:
                if pending.row_id is not None:
                    deletes.append((pending.row_id,))
            elif pending.row_id is None:
                values = orjson.dumps(pending.values).decode()
                inserts.append((one.gpu.pk, adapt(pending.ts), values, pending.jobs, adapt(pending.first_received)))
            elif pending.changed:
                updates.append((orjson.dumps(pending.values).decode(), pending.jobs, pending.row_id))
        if handed and one.complete:
            states.append((*(adapt(value) if isinstance(value, dt.datetime) else value
                             for value in (getattr(one.gpu, name) for name in _STATE)), one.gpu.pk))  # fmt: skip
    sql = _sql()
    with connection.cursor() as cursor:
        for statement, rows in (("delete", deletes), ("update", updates), ("insert", inserts), ("state", states)):
            if rows:
                cursor.executemany(sql[statement], rows)


def _samples(pendings: list[Pending]) -> int:
    return sum(len(pending.values) for pending in pendings)


def settle(fed_host: FedHost, host: Host, work: list[GpuWork], now: dt.datetime, *, refuse: bool) -> HandOnResult:
    """Hand on the complete readings of one host's GPUs (locked by the caller) and store what
    stays pending. When ingest refuses the host's batch: with `refuse` (the pass) each GPU's on its
    own, a refused GPU's samples counted and never tried again; without (the write) everything
    stays pending for the pass."""
    for one in work:
        one.late, one.complete = _complete(one.gpu, one.pending, now)
    result = HandOnResult(skipped=sum(_samples(one.late) for one in work))
    try:
        result.readings = _ingest(fed_host, host, work, now)
        _pending_write(work, handed=True)
    except (ApplicationError, ValidationError) as error:
        if not refuse:
            log.info("remote write: readings of host %s left for the pass: %s", fed_host.host_id, error)
            result.left = sum(len(one.complete) for one in work)
            for one in work:
                one.complete = []
            _pending_write(work, handed=False)
        else:
            for one in work:
                result.add(_settle_one(fed_host, host, one, now))
    _count(fed_host.source_id, skipped=result.skipped, dropped=result.dropped)
    return result


def _settle_one(fed_host: FedHost, host: Host, one: GpuWork, now: dt.datetime) -> HandOnResult:
    # Read again: ingest keeps a host's GPU rows per process while its inventory_version holds,
    # and the GPU before this one may have registered itself.
    host.refresh_from_db(fields=["inventory_version"])
    try:
        readings = _ingest(fed_host, host, [one], now)
        _pending_write([one], handed=True)
        return HandOnResult(readings=readings)
    except (ApplicationError, ValidationError) as error:
        log.warning("remote write: readings of GPU %s refused by ingest: %s", one.gpu.uuid, error)
        forbidden = isinstance(error, Forbidden)
    # Refused: its complete readings' samples counted (dropped for a GPU of another host, skipped
    # otherwise) and deleted; the GPU's baselines move past them.
    samples = _samples(one.complete)
    if one.complete:
        one.gpu.handed_until = one.complete[-1].ts
    _pending_write([one], handed=True)
    return HandOnResult(dropped=samples) if forbidden else HandOnResult(skipped=samples)


def _count(source_id: int, *, skipped: int = 0, dropped: int = 0) -> None:
    if skipped or dropped:
        IngestSource.objects.filter(pk=source_id).update(
            samples_skipped=F("samples_skipped") + skipped, samples_dropped=F("samples_dropped") + dropped
        )


def gpus_lock(gpu_ids) -> dict[int, SourceGpu]:
    """The GPUs' rows, locked until the transaction ends (PostgreSQL; SQLite's write lock is the
    whole database's), in id order so that two transactions never wait on each other in a loop."""
    gpus = SourceGpu.objects.select_related("fed_host__host").select_for_update(of=("self",))
    return {gpu.pk: gpu for gpu in gpus.filter(pk__in=list(gpu_ids)).order_by("pk")}


def remote_readings_hand_on(*, now: dt.datetime | None = None) -> HandOnResult:
    """One pass over the pending readings (one pass at a time in the cluster): the readings
    completed by waiting, and any a write left."""
    with pass_lock("remote-write-hand-on") as held:
        if not held:
            return HandOnResult()
        return _pass(now or timezone.now())


def _pass(now: dt.datetime) -> HandOnResult:
    result = HandOnResult()
    pending = pending_read()
    if not pending:
        return result
    gpus = SourceGpu.objects.in_bulk(pending.keys())
    hosts: dict[int, list[int]] = defaultdict(list)  # fed host → its GPUs with readings to hand on
    for gpu_id, readings in pending.items():
        late, complete = _complete(gpus[gpu_id], readings, now)
        if late or complete:
            hosts[gpus[gpu_id].fed_host_id].append(gpu_id)
    for gpu_ids in hosts.values():
        with transaction.atomic():  # read again, locked: a write may have handed some on meanwhile
            locked = gpus_lock(gpu_ids)
            if not locked:
                continue
            fed_host = next(iter(locked.values())).fed_host
            again = pending_read(locked.keys())
            work = [GpuWork(gpu, again.get(gpu.pk, {})) for gpu in locked.values()]
            result.add(settle(fed_host, fed_host.host, work, now, refuse=True))
    return result
