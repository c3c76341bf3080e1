"""Prune old telemetry: raw readings by whole day partitions on PostgreSQL, everything else (and
readings on SQLite) in bounded chunks, so the job never holds a long lock or a huge transaction."""

import datetime as dt

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from portal.core import engine
from portal.telemetry import ledger
from portal.telemetry.models import IngestBatch, Reading, Rollup1m, StageDone, XidEvent
from portal.telemetry.services import batches, compression, partitions, rollup_chunks

CHUNK = 10_000
# SQLite deletes readings in chunks of READING_CHUNK, at most READING_MAX_CHUNKS per hourly run:
# 10 million readings an hour, 1.4 times what the embedded default is sized for (200 GPUs at
# 10 Hz: 2,000 readings/s, 7.2 million an hour), so a backlog drains.
READING_CHUNK = 50_000
READING_MAX_CHUNKS = 200


def _prune(queryset, time_field: str, before: dt.datetime, *, chunk: int, max_chunks: int) -> int:
    deleted = 0
    for _ in range(max_chunks):
        ids = list(queryset.filter(**{f"{time_field}__lt": before}).values_list("pk", flat=True)[:chunk])
        if not ids:
            break
        with transaction.atomic():
            deleted += queryset.model.objects.filter(pk__in=ids).delete()[0]
    return deleted


def _prune_readings_chunked(table: str, before: dt.datetime, *, chunk: int, max_chunks: int) -> int:
    """Chunks by row address (SQLite's rowid, PostgreSQL's ctid) through an index on ts: no key
    list in Python, each chunk its own transaction."""
    row = engine.row_address()
    sql = f"DELETE FROM {table} WHERE {row} IN (SELECT {row} FROM {table} WHERE ts < %s LIMIT %s)"
    before_db = connection.ops.adapt_datetimefield_value(before)
    deleted = 0
    for _ in range(max_chunks):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [before_db, chunk])
            count = cursor.rowcount
        deleted += count
        if count < chunk:
            break
    return deleted


def _prune_readings(before: dt.datetime, *, chunk: int, max_chunks: int) -> int:
    """PostgreSQL: drop the day partitions wholly before the cutoff; the cutoff's own day stays
    until it has passed whole (readings are kept up to a day longer than RETENTION_RAW_DAYS, and
    no row is ever deleted one by one). A partition that is not a day's (a default partition an
    admin added) is pruned in chunks; compressed readings (a row per GPU and hour) go by the hour.
    SQLite: chunks."""
    if not partitions.partitioned():
        return _prune_readings_chunked(Reading._meta.db_table, before, chunk=chunk, max_chunks=max_chunks)
    deleted = sum(partitions.reading_partitions_drop(before=before).values())
    deleted += compression.chunks_prune(before)
    for table in partitions.other_partitions():
        deleted += _prune_readings_chunked(table, before, chunk=chunk, max_chunks=max_chunks)
    return deleted


def raw_cutoff(now: dt.datetime) -> dt.datetime:
    """Raw readings before this may go: past RETENTION_RAW_DAYS, but never any the rollups have
    not covered yet, nor any of an hour a late reading may still come in for (a late reading's
    minute is rolled up again with the stored readings around it, and ingest accepts readings up
    to INGEST_MAX_AGE_HOURS old), nor any the pipeline still needs (the readings of a batch some stage
    has not finished: telemetry.ledger)."""
    cutoff = now - dt.timedelta(days=settings.RETENTION_RAW_DAYS)
    cutoff = min(cutoff, now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS))
    needed = ledger.oldest_pending_reading()
    if needed is not None:
        cutoff = min(cutoff, needed)
    return cutoff.replace(minute=0, second=0, microsecond=0)


def telemetry_prune(
    *, now: dt.datetime | None = None, chunk: int | None = None, max_chunks: int | None = None
) -> dict[str, int]:
    """Delete raw readings, XID events and batch rows past RETENTION_RAW_DAYS and 1-minute
    rollups past RETENTION_1M_DAYS (a compressed day once wholly past; never raw readings the
    pipeline still needs: see raw_cutoff). 1-hour rollups are kept. Returns what it deleted (for
    dropped partitions, the planner's row counts). `chunk` and `max_chunks` bound every chunked
    delete (defaults: READING_CHUNK and READING_MAX_CHUNKS for readings, CHUNK and 100 for the
    rest)."""
    now = now or timezone.now()
    raw_before = raw_cutoff(now)
    minute_before = now - dt.timedelta(days=settings.RETENTION_1M_DAYS)
    bounds = {"chunk": chunk or CHUNK, "max_chunks": max_chunks or 100}
    reading_bounds = {"chunk": chunk or READING_CHUNK, "max_chunks": max_chunks or READING_MAX_CHUNKS}
    return {
        "readings": _prune_readings(raw_before, **reading_bounds),
        "xid_events": _prune(XidEvent.objects.all(), "ts", raw_before, **bounds),
        # Finished batch rows become compact idempotency keys, kept while ingest accepts their readings.
        "batches": batches.batches_fold(now=now),
        "batch_keys": batches.batch_keys_prune(now=now),
        # Compressed days go whole, a row per GPU and day, once past the cutoff.
        "rollups_1m": _prune(Rollup1m.objects.all(), "bucket", minute_before, **bounds)
        + rollup_chunks.chunks_prune("1m", minute_before),
    }


def telemetry_housekeeping(*, now: dt.datetime | None = None) -> None:
    """Beat's hourly job (telemetry_prune_task): the readings' day partitions DAYS_AHEAD days ahead
    before anything is pruned (PostgreSQL), pruning, then on PostgreSQL the readings past
    READINGS_COMPRESS_AFTER_HOURS compressed (a row per GPU-hour), the rollups of the days before
    that (a row per GPU and day), and the day just over's key index rebuilt full."""
    now = now or timezone.now()
    partitions.reading_partitions_ensure(now=now)
    telemetry_prune(now=now)
    compression.readings_compress(now=now)
    rollup_chunks.rollups_compress(now=now)
    partitions.reading_partitions_compact(now=now)
    bookkeeping_indexes_renew()


# The tables whose rows come and go all day (batch rows, the pipeline's ledger): their B-tree
# indexes keep the pages of rows long gone (emptied pages are recycled late, if at all, under a
# key that only grows) and end many times the size of the few rows they hold.
CHURNED_TABLES = (IngestBatch._meta.db_table, StageDone._meta.db_table)
# Bytes an index entry takes at most once rebuilt (key, tuple header, line pointer, page slack):
# an index over that many times what its rows need is rebuilt.
ENTRY_BYTES, RENEW_OVER = 40, 3


def bookkeeping_indexes_renew() -> list[str]:
    """PostgreSQL: rebuild the indexes of a churned table grown past RENEW_OVER times what its
    rows need (concurrently outside a transaction: ingest and the pipeline keep writing). Cheap: the
    tables hold an hour or two of batches. Returns the tables rebuilt."""
    if not engine.online_index_rebuild():
        return []
    renewed = []
    with connection.cursor() as cursor:
        for table in CHURNED_TABLES:
            cursor.execute(
                f"SELECT pg_indexes_size(%s), count(*), (SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass) "
                f"FROM {table}",
                [table, table],
            )
            size, rows, indexes = cursor.fetchone()
            if size <= RENEW_OVER * max(rows * ENTRY_BYTES, 8192) * indexes:
                continue
            partitions.table_indexes_rebuild(cursor, table)
            renewed.append(table)
    return renewed
