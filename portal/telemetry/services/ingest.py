"""Store one agent batch: all of it in one transaction, or nothing.

The hot path of the portal. On PostgreSQL the usual batch (its host and GPUs as we hold them)
is stored by one prepared statement: batch row, readings, XID events and the GPUs' latest state
in one round trip, atomic by itself. Otherwise (SQLite, or an inventory change) it runs a fixed
handful of statements in one transaction whatever the number of readings: the batch row, one
COPY (or bulk insert) of the readings, one upsert of the GPUs' latest state, and the inventory
work the change needs.
"""

import contextlib
import datetime as dt
import functools
import logging
import time
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

import orjson
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from portal.core import engine
from portal.core.db import hot_cursor
from portal.core.errors import Forbidden, InvalidInput
from portal.fleet import selectors as fleet_selectors
from portal.fleet import services as fleet_services
from portal.fleet import swaps
from portal.fleet.selectors import GpuStatus
from portal.telemetry import hooks, metrics
from portal.telemetry.models import (
    READING_METRICS,
    READING_ROW_COLUMNS,
    THROTTLE_BIT,
    GpuLatest,
    IngestBatch,
    JobSet,
    Reading,
    XidEvent,
)
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services import partitions
from portal.telemetry.services.batches import batch_seen

if TYPE_CHECKING:  # types in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu, Host

log = logging.getLogger(__name__)

MAX_FUTURE = dt.timedelta(minutes=5)

# How PostgreSQL stores a batch: "one statement" (a prepared statement writes the batch row,
# readings, XID events and latest state) for a batch that changes no inventory, COPY for the rest;
# "copy" uses COPY for every batch and "bulk insert" a bulk INSERT (SQLite's way). The tests and
# bench/ingest.py compare the three.
PG_WRITE_METHODS = ("one statement", "copy", "bulk insert")
pg_write_method = "one statement"

# Positions in a stored row (READING_ROW_COLUMNS), worked out once rather than per batch.
_THROTTLE_POSITION = READING_METRICS.index("throttle_reasons")
_GPU_LOOKUP_FIELDS = ("id", "uuid", "host_id", "agent_warnings", *fleet_services.AGENT_GPU_FIELDS.values())


@dataclass
class IngestResult:
    accepted: int
    duplicate: bool
    batch_pk: int | None = None
    gpu_ids: list[int] = field(default_factory=list)


_ts_of = attrgetter("ts")
_xid_events_of = attrgetter("xid_events")


def _check_timestamps(batch: BatchIn, timestamps: list[dt.datetime], now: dt.datetime) -> None:
    max_age_h = settings.INGEST_MAX_AGE_HOURS  # read per batch, so tests and admins can change it
    oldest, newest = now - dt.timedelta(hours=max_age_h), now + MAX_FUTURE
    if not timestamps or (
        oldest <= min(timestamps) and max(timestamps) <= newest and not any(map(_xid_events_of, batch.readings))
    ):
        return  # the usual batch, checked without a Python loop over its readings
    errors = []
    for position, reading in enumerate(batch.readings):
        if reading.ts < oldest:
            errors.append((f"readings.{position}.ts", f"more than {max_age_h} h old"))
        elif reading.ts > newest:
            errors.append((f"readings.{position}.ts", "more than 5 min in the future"))
        for event_position, event in enumerate(reading.xid_events):
            if not oldest <= event.ts <= newest:
                errors.append((f"readings.{position}.xid_events.{event_position}.ts", "outside the accepted window"))
        if len(errors) >= 20:
            break
    if errors:
        raise InvalidInput("reading timestamps outside the accepted window", problems=errors)


# Each host's GPU rows, kept per process between batches: the lookup was a tenth of ingest's CPU.
# Valid while the host's inventory_version (read with the token, every request) is unchanged; the
# fleet services bump it on every GPU create, change, move or delete. The age bound is only a
# backstop for writes that bypass them.
HOST_GPUS_MAX_AGE_S = 300.0
_host_gpus: dict[int, tuple[int, float, dict[str, dict]]] = {}


def _host_gpu_rows(host: "Host") -> dict[str, dict]:
    cached = _host_gpus.get(host.pk)
    now = time.monotonic()
    if cached is not None and cached[0] == host.inventory_version and now - cached[1] < HOST_GPUS_MAX_AGE_S:
        return cached[2]
    rows = {row["uuid"]: row for row in fleet_selectors.gpus().filter(host_id=host.pk).values(*_GPU_LOOKUP_FIELDS)}
    _host_gpus[host.pk] = (host.inventory_version, now, rows)
    return rows


def host_gpus_forget(host_id: int | None = None) -> None:
    """Drop the cached GPU rows of one host, or of all (tests, and after a failed batch)."""
    if host_id is None:
        _host_gpus.clear()
    else:
        _host_gpus.pop(host_id, None)


def _resolve_gpus(host: "Host", batch: BatchIn) -> dict[str, dict]:
    """The batch's GPUs already registered, by uuid. Rejects other hosts' GPUs and readings for
    GPUs that are neither registered nor in the batch's inventory."""
    inventory_uuids = [gpu.uuid for gpu in batch.gpus]
    if len(set(inventory_uuids)) != len(inventory_uuids):
        duplicates = sorted({u for u in inventory_uuids if inventory_uuids.count(u) > 1})
        raise InvalidInput("the inventory lists a GPU twice", problems=[("gpus", f"repeated: {duplicates}")])
    wanted = set(inventory_uuids) | {reading.gpu_uuid for reading in batch.readings}
    own = _host_gpu_rows(host)
    known = {uuid: own[uuid] for uuid in wanted if uuid in own}
    missing = wanted - known.keys()
    if missing:  # new GPUs, or another host's: ask the database
        known.update(
            {row["uuid"]: row for row in fleet_selectors.gpus().filter(uuid__in=missing).values(*_GPU_LOOKUP_FIELDS)}
        )
    foreign = sorted(uuid for uuid, row in known.items() if row["host_id"] != host.pk)
    if foreign:
        raise Forbidden(f"GPU {foreign[0]} is registered to another host; an admin must move it")
    _check_gpu_bound(host, batch, known, own)
    listed = set(inventory_uuids)
    unknown = [
        (f"readings.{position}.gpu_uuid", "unknown GPU and not in this batch's gpus")
        for position, reading in enumerate(batch.readings)
        if reading.gpu_uuid not in known and reading.gpu_uuid not in listed
    ]
    if unknown:
        raise InvalidInput("readings for unknown GPUs", problems=unknown[:20])
    return known


def _check_gpu_bound(host: "Host", batch: BatchIn, known: dict[str, dict], own: dict[str, dict]) -> None:
    """A host registers at most MAX_GPUS_PER_HOST GPUs: a 403 naming the first GPU past the bound
    (nothing of the batch stored), so that a broken or hostile agent cannot create GPUs, and
    audit-log entries, without end. An admin raises the setting or retires/moves GPUs."""
    bound = settings.MAX_GPUS_PER_HOST
    new = [(position, gpu.uuid) for position, gpu in enumerate(batch.gpus) if gpu.uuid not in known]
    if not new or len(own) + len(new) <= bound:
        return
    position, uuid = new[max(0, bound - len(own))]
    raise Forbidden(
        f"host {host.hostname!r} may register at most {bound} GPUs (MAX_GPUS_PER_HOST); it has {len(own)} and this "
        f"batch adds {len(new)}",
        problems=[(f"gpus.{position}.uuid", f"GPU {uuid} would be past the bound of {bound} GPUs per host")],
    )


def _gpu_row_matches(row: dict | None, reported: dict) -> bool:
    """Whether a registered GPU's row already holds everything its agent reports (unknown,
    null, values never count as a change; odd values count as the unknown they are kept as)."""
    if row is None:
        return False
    values, warnings = fleet_services.agent_gpu_values(reported=reported, current=row)
    return row["agent_warnings"] == warnings and all(row[column] == value for column, value in values.items())


def _inventory_unchanged(host: "Host", batch: BatchIn, known: dict[str, dict]) -> bool:
    """The usual batch: the host and every GPU it lists are as we hold them."""
    if fleet_services.host_agent_info_changes(host=host, reported=batch.host.model_dump()):
        return False
    return all(_gpu_row_matches(known.get(reported.uuid), reported.model_dump()) for reported in batch.gpus)


def _sync_inventory(host: "Host", batch: BatchIn, known: dict[str, dict], seen_at: dt.datetime) -> dict[str, int]:
    gpu_ids = {uuid: row["id"] for uuid, row in known.items()}
    fleet_services.host_agent_info_update(host=host, reported=batch.host.model_dump(), seen_at=seen_at)
    for position, reported in enumerate(batch.gpus):
        row = known.get(reported.uuid)
        values = reported.model_dump()
        if _gpu_row_matches(row, values):
            continue  # the usual case: nothing changed, no query
        existing = fleet_selectors.gpus().get(pk=row["id"]) if row else None
        try:
            gpu = fleet_services.gpu_inventory_sync(host=host, reported=values, existing=existing, seen_at=seen_at)
        except InvalidInput as error:
            # Values the GPU model refuses (shutdown below slowdown, …) will never be accepted: a
            # 4xx, not a 5xx that the agent would retry for ever. Rolls back the whole batch.
            raise InvalidInput("invalid GPU inventory", problems=_inventory_problems(position, error)) from None
        gpu_ids[gpu.uuid] = gpu.pk
        if existing is None:  # only a GPU registered just now may be a card swapped into a slot
            _swap_check(host=host, new_gpu=gpu, batch=batch, seen_at=seen_at)
    return gpu_ids


def _swap_check(*, host: "Host", new_gpu: "Gpu", batch: BatchIn, seen_at: dt.datetime) -> None:
    """A new GPU at the PCI bus id of one that left its slot for repair is its replacement: the
    old one is retired and linked to it (fleet.swaps). It left when it is out for repair, or when
    it has a repair record and no reading since; a GPU the agent still lists, or one reporting
    since its repair, keeps its slot (the new GPU is then registered beside it, as before)."""
    candidates = swaps.swap_candidates(
        host=host, pci_bus_id=new_gpu.pci_bus_id, exclude_uuids=[gpu.uuid for gpu in batch.gpus]
    )
    if not candidates:
        return
    last_read = dict(GpuLatest.objects.filter(gpu_id__in=[gpu.pk for gpu, _ in candidates]).values_list("gpu_id", "ts"))
    for old_gpu, repair in candidates:
        last = last_read.get(old_gpu.pk)
        silent_since_repair = repair is not None and (last is None or last < repair.performed_at)
        if old_gpu.status == GpuStatus.OUT_FOR_REPAIR or silent_since_repair:
            swaps.gpu_swap_record(old_gpu=old_gpu, new_gpu=new_gpu, repair=repair, at=seen_at)
            return


def _inventory_problems(position: int, error: InvalidInput) -> list[tuple[str, str]]:
    """The fleet's problems (by GPU column) as the protocol names them (gpus.<position>.<name>)."""
    protocol_names = {column: name for name, column in fleet_services.AGENT_GPU_FIELDS.items()}
    problems = []
    for problem in error.problems:
        name = protocol_names.get(problem.loc, problem.loc)
        problems.append((f"gpus.{position}" if name == "request" else f"gpus.{position}.{name}", problem.msg))
    return problems


# A reading's metrics before and after throttle_reasons (stored as a THROTTLE_BIT mask), read in C.
_metrics_before_throttle = attrgetter(*READING_METRICS[:_THROTTLE_POSITION])
_metrics_after_throttle = attrgetter(*READING_METRICS[_THROTTLE_POSITION + 1 :])
_throttle_masks: dict[tuple[str, ...], int] = {}


def _throttle_mask(reasons: list[str] | None) -> int | None:
    if reasons is None:
        return None
    key = tuple(reasons)
    mask = _throttle_masks.get(key)
    if mask is None:
        mask = sum(THROTTLE_BIT[name] for name in set(reasons))
        if len(_throttle_masks) < 4096:  # agents send a handful of combinations; a hostile one, more
            _throttle_masks[key] = mask
    return mask


# Job sets (JobSet) by their keys as a reading lists them, kept per process: rows are never
# deleted or changed, so an id once known stays right. Bounded: a hostile agent may name many.
_job_set_ids: dict[tuple[str, ...], int] = {}
JOB_SET_CACHE_MAX = 65_536


def _job_sets_resolve(batch: BatchIn) -> dict[tuple[str, ...], int]:
    """The ids of the job sets the batch's readings name, by the readings' own key lists: from
    the process's cache, else created (one insert and one select for all the new ones). Outside
    the batch's transaction is fine: a job set nobody stored a reading with costs a row."""
    wanted = {tuple(reading.jobs) for reading in batch.readings if reading.jobs is not None}
    missing = [keys for keys in wanted if keys not in _job_set_ids]
    if not missing:
        return _job_set_ids
    texts = {keys: " ".join(sorted(set(keys))) for keys in missing}
    JobSet.objects.bulk_create([JobSet(keys=text) for text in set(texts.values())], ignore_conflicts=True)
    ids = dict(JobSet.objects.filter(keys__in=set(texts.values())).values_list("keys", "pk"))
    if len(_job_set_ids) + len(texts) > JOB_SET_CACHE_MAX:
        _job_set_ids.clear()
    _job_set_ids.update({keys: ids[text] for keys, text in texts.items()})
    return _job_set_ids


def job_sets_forget() -> None:
    """Drop the cached job set ids (tests that flush the table)."""
    _job_set_ids.clear()


def reading_rows(batch: BatchIn, gpu_ids: dict[str, int]) -> list[tuple]:
    """The batch's readings as stored rows (READING_ROW_COLUMNS). Its readings may be pydantic's
    ReadingIn or the fast path's structs (portal.telemetry.ingest_fast): attributes only."""
    job_sets = _job_sets_resolve(batch) if any(reading.jobs is not None for reading in batch.readings) else {}
    return [
        (
            gpu_ids[reading.gpu_uuid],
            reading.ts,
            *_metrics_before_throttle(reading),
            _throttle_mask(reading.throttle_reasons),
            *_metrics_after_throttle(reading),
            len(reading.xid_events),
            None if reading.jobs is None else job_sets[tuple(reading.jobs)],
        )
        for reading in batch.readings
    ]


def rows_json(rows: list[tuple]) -> str:
    """Rows as the one statement's JSON array (orjson writes datetimes as RFC 3339 itself)."""
    return orjson.dumps(rows).decode()


def _insert_readings(rows: list[tuple], now: dt.datetime) -> None:
    if not rows:
        return
    if engine.copies_rows():
        try:
            _insert_readings_postgresql(rows)
        except IntegrityError as error:
            if not partitions.missing_partition(error):
                raise
            _partitions_create(rows, now)
            _insert_readings_postgresql(rows)
        return
    # One prepared INSERT run by sqlite3's executemany, in C: the ORM's bulk_create spent most of
    # SQLite ingest's CPU compiling 100 model instances into SQL. Only the time needs adapting (the
    # ORM's UTC text); numbers and booleans are stored as they come.
    adapt = connection.ops.adapt_datetimefield_value
    if settings.USE_TZ and connection.timezone_name == "UTC":
        # What adapt does to the schema's UTC times (Instant), at half its CPU: the naive time's text.
        adapt = _naive_text
    with connection.cursor() as cursor:
        cursor.executemany(_sqlite_insert_sql(), [(row[0], adapt(row[1]), *row[2:]) for row in rows])


def _insert_readings_postgresql(rows: list[tuple]) -> None:
    """COPY, or a bulk insert, each in a savepoint: a failure (a missing day partition) leaves the
    batch's transaction usable for the retry."""
    if pg_write_method != "bulk insert":
        table = Reading._meta.db_table
        try:
            # A reading already stored for the same GPU and instant (an agent that sends one twice
            # in different batches) fails the COPY, and the bulk insert below then stores the others.
            with transaction.atomic(), connection.wrap_database_errors, connection.cursor() as cursor:
                raw = cursor.cursor  # psycopg 3 cursor inside Django's transaction (errors as Django's)
                with raw.copy(f"COPY {table} ({', '.join(READING_ROW_COLUMNS)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            return
        except IntegrityError as error:
            if partitions.missing_partition(error):
                raise
    with transaction.atomic():
        Reading.objects.bulk_create(
            [Reading(**dict(zip(READING_ROW_COLUMNS, row, strict=True))) for row in rows],
            batch_size=1000,
            ignore_conflicts=True,  # a second reading of a GPU at the same instant is dropped
        )


# Ingest's partition creation runs one at a time across the portal: a second batch waits, then
# finds the days created (CREATE TABLE IF NOT EXISTS alone races on the catalogue's unique index).
_PARTITIONS_LOCK = 0x6770_7061_7274  # pg_advisory_xact_lock key


def _partitions_create(rows: list[tuple], now: dt.datetime) -> None:
    """The day partitions are missing (beat, which creates them ahead, has been stopped for
    longer than partitions.DAYS_AHEAD): create the days ingest may write to and the batch's own.
    In the batch's transaction when there is one (committed with it)."""
    days = set(partitions.days_needed(now)) | {row[1].astimezone(dt.UTC).date() for row in rows}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PARTITIONS_LOCK])
        created = partitions.reading_partitions_ensure(days=sorted(days), cursor=cursor)
    log.warning("ingest: created missing reading partitions %s; is beat running?", ", ".join(created) or "none")


def _naive_text(moment: dt.datetime) -> str:
    return str(moment.replace(tzinfo=None))


@functools.cache
def _sqlite_insert_sql() -> str:
    columns = ", ".join(READING_ROW_COLUMNS)
    values = ", ".join(["%s"] * len(READING_ROW_COLUMNS))
    return f"INSERT INTO {Reading._meta.db_table} ({columns}) VALUES ({values}) ON CONFLICT DO NOTHING"


# The metrics GpuLatest keeps (the registry's `latest`, portal/telemetry/metrics.py).
_LATEST_COLUMNS = metrics.names(latest=True)
_LATEST_POSITIONS = tuple(READING_ROW_COLUMNS.index(name) for name in _LATEST_COLUMNS)


def _upsert_latest(rows: list[tuple], received_at: dt.datetime) -> None:
    """Keep each GPU's newest reading; a late batch from an agent's spool never overwrites a newer one."""
    newest: dict[int, tuple] = {}
    for row in rows:
        current = newest.get(row[0])
        if current is None or row[1] >= current[1]:
            newest[row[0]] = row
    if not newest:
        return
    columns = ("gpu_id", "ts", "received_at", *_LATEST_COLUMNS)
    params = []
    for row in newest.values():
        params.extend((row[0], row[1], received_at, *(row[position] for position in _LATEST_POSITIONS)))
    placeholders = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(newest))
    updates = ", ".join(f"{name} = excluded.{name}" for name in columns[1:])
    table = "telemetry_gpulatest"
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES {placeholders} "
        f"ON CONFLICT (gpu_id) DO UPDATE SET {updates} WHERE excluded.ts >= {table}.ts"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def reading_batch_ingest(*, host: "Host", batch: BatchIn, now: dt.datetime | None = None) -> IngestResult:
    now = now or timezone.now()
    if batch.host.hostname != host.hostname:
        raise Forbidden(f"this token belongs to host {host.hostname!r}, not {batch.host.hostname!r}")
    timestamps = list(map(_ts_of, batch.readings))
    _check_timestamps(batch, timestamps, now)
    # No "seen this batch_id?" query up front for a recent batch: duplicates are rare, and the unique
    # index on batch_id answers it inside the transaction below, race-free. An older one may have
    # been folded into the compact keys (services/batches.py): one lookup.
    if batch_seen(host_id=host.pk, batch_id=batch.batch_id, first_ts=min(timestamps, default=None), now=now):
        return IngestResult(accepted=0, duplicate=True)
    known = _resolve_gpus(host, batch)
    one_statement = pg_write_method == "one statement"
    if engine.writable_ctes() and one_statement and _inventory_unchanged(host, batch, known):
        return _ingest_in_one_statement(host=host, batch=batch, known=known, now=now, timestamps=timestamps)
    try:
        with transaction.atomic():
            stored = IngestBatch.objects.create(
                batch_id=batch.batch_id, host=host, sent_at=batch.sent_at, received_at=now,
                reading_count=len(batch.readings), first_ts=min(timestamps, default=None),
                last_ts=max(timestamps, default=None),
            )  # fmt: skip
            # Without readings, sent_at (never later than our clock: a record "in the future" is refused).
            seen_at = max(timestamps, default=min(batch.sent_at, now))
            gpu_ids = _sync_inventory(host, batch, known, seen_at=seen_at)
            rows = reading_rows(batch, gpu_ids)
            _insert_readings(rows, now)
            xids = [
                XidEvent(gpu_id=gpu_ids[reading.gpu_uuid], ts=event.ts, code=event.code, batch=stored)
                for reading in batch.readings
                for event in reading.xid_events
            ]
            if xids:
                XidEvent.objects.bulk_create(xids)
            _upsert_latest(rows, now)
            result = _hand_on(host=host, batch_pk=stored.pk, gpu_ids=gpu_ids, rows=rows)
    except IntegrityError:
        # A batch sent again, or the same one twice at once: the unique index lets one through.
        if IngestBatch.objects.filter(batch_id=batch.batch_id).exists():
            return IngestResult(accepted=0, duplicate=True)
        host_gpus_forget(host.pk)  # e.g. a GPU deleted behind the cache: the agent's retry re-reads
        raise
    return result


def _hand_on(*, host: "Host", batch_pk: int, gpu_ids: dict[str, int], rows: list[tuple]) -> IngestResult:
    """Once the batch commits, hand it to the consumers (hooks.batch_stored); what ingest answers."""
    touched = sorted({row[0] for row in rows} | set(gpu_ids.values()))
    transaction.on_commit(
        lambda: hooks.batch_stored.call(batch_pk=batch_pk, host_id=host.pk, gpu_ids=touched, readings=rows)
    )
    return IngestResult(accepted=len(rows), duplicate=False, batch_pk=batch_pk, gpu_ids=touched)


@functools.cache
def _one_statement_sql(duplicates: bool = False) -> str:
    """Batch row, readings, XID events and latest state in one statement.

    The readings travel as one JSON array of rows (READING_ROW_COLUMNS order) and are unpacked
    by the server: dumping one string costs the portal a fraction of what COPY's per-value
    encoding or per-column arrays cost, and the portal's CPU is what limits ingest. When the
    batch_id is already stored, the batch CTE returns no row and nothing else is written.
    `duplicates`: readings already stored (a GPU and instant) are left out; without it such a
    batch fails with a unique violation, and ingest runs it again with (ON CONFLICT's
    speculative insertion costs the server a tenth more per reading, for a rare case).
    """

    def sql_type(column):
        return Reading._meta.get_field(column.removesuffix("_id")).db_type(connection)

    batch_table, reading_table, latest_table = (
        IngestBatch._meta.db_table, Reading._meta.db_table, GpuLatest._meta.db_table,
    )  # fmt: skip
    xid_table = XidEvent._meta.db_table
    unpacked = ", ".join(
        f"(row->>{position})::{sql_type(name)} AS {name}" for position, name in enumerate(READING_ROW_COLUMNS)
    )
    columns = ", ".join(READING_ROW_COLUMNS)
    latest_columns = ", ".join(_LATEST_COLUMNS)
    latest_updates = ", ".join(f"{name} = excluded.{name}" for name in ("ts", "received_at", *_LATEST_COLUMNS))
    gpu_type, ts_type = sql_type("gpu_id"), sql_type("ts")
    return f"""
WITH batch AS (
    INSERT INTO {batch_table} (batch_id, host_id, sent_at, received_at, reading_count, first_ts, last_ts)
    VALUES (%(batch_id)s, %(host_id)s, %(sent_at)s, %(received_at)s, %(reading_count)s, %(first_ts)s,
            %(last_ts)s)
    ON CONFLICT (batch_id) DO NOTHING
    RETURNING id
), incoming AS (
    SELECT {unpacked}, position
    FROM jsonb_array_elements(%(readings)s::jsonb) WITH ORDINALITY AS element(row, position)
), stored AS (
    INSERT INTO {reading_table} ({columns}) SELECT {columns} FROM incoming WHERE EXISTS (SELECT FROM batch)
    {"ON CONFLICT DO NOTHING" if duplicates else ""}
), xids AS (
    INSERT INTO {xid_table} (gpu_id, ts, code, batch_id)
    SELECT (xid->>0)::{gpu_type}, (xid->>1)::{ts_type}, (xid->>2)::integer, batch.id
    FROM jsonb_array_elements(%(xids)s::jsonb) AS xid, batch
), latest AS (
    INSERT INTO {latest_table} (gpu_id, ts, received_at, {latest_columns})
    SELECT DISTINCT ON (gpu_id) gpu_id, ts, %(received_at)s, {latest_columns}
    FROM incoming WHERE EXISTS (SELECT FROM batch)
    ORDER BY gpu_id, ts DESC, position DESC
    ON CONFLICT (gpu_id) DO UPDATE SET {latest_updates} WHERE excluded.ts >= {latest_table}.ts
)
SELECT id FROM batch"""


def _run_one_statement(params: dict) -> tuple | None:
    # Atomic by itself; inside a caller's transaction (tests, a view's ATOMIC_REQUESTS) a savepoint,
    # so that a failure (a missing day partition, a reading stored already) leaves that transaction
    # usable for the retry.
    try:
        return _execute_one_statement(params, duplicates=False)
    except IntegrityError as error:
        if not _unique_violation(error):
            raise
    return _execute_one_statement(params, duplicates=True)


def _execute_one_statement(params: dict, *, duplicates: bool) -> tuple | None:
    with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext(), hot_cursor() as cursor:
        cursor.execute(_one_statement_sql(duplicates), params)
        return cursor.fetchone()


def _unique_violation(error: IntegrityError) -> bool:
    """A reading stored already (the batch row and the latest state never raise one: their
    conflicts are handled in the statement)."""
    cause = error.__cause__ if error.__cause__ is not None else error
    return getattr(cause, "sqlstate", None) == "23505"


def _ingest_in_one_statement(
    *, host: "Host", batch: BatchIn, known: dict[str, dict], now: dt.datetime, timestamps: list[dt.datetime]
) -> IngestResult:
    gpu_ids = {uuid: row["id"] for uuid, row in known.items()}
    rows = reading_rows(batch, gpu_ids)
    xids = [
        (gpu_ids[reading.gpu_uuid], event.ts, event.code) for reading in batch.readings for event in reading.xid_events
    ]
    params = {
        "batch_id": batch.batch_id, "host_id": host.pk, "sent_at": batch.sent_at, "received_at": now,
        "reading_count": len(rows), "first_ts": min(timestamps, default=None), "last_ts": max(timestamps, default=None),
        "readings": rows_json(rows),
        "xids": rows_json(xids),
    }  # fmt: skip
    try:
        try:
            stored = _run_one_statement(params)
        except IntegrityError as error:
            if not partitions.missing_partition(error):
                raise
            _partitions_create(rows, now)
            stored = _run_one_statement(params)
    except IntegrityError:
        host_gpus_forget(host.pk)  # e.g. a GPU deleted behind the cache: the agent's retry re-reads
        raise
    if stored is None:  # the batch_id is stored already (sent again, or twice at once)
        return IngestResult(accepted=0, duplicate=True)
    return _hand_on(host=host, batch_pk=stored[0], gpu_ids=gpu_ids, rows=rows)
