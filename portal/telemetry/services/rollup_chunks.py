"""Rollups of the days over stored compressed, a row per GPU and UTC day of minutes or month of
hours, on PostgreSQL.

A 1-minute rollup row costs about 190 bytes (a tuple of 37 columns, its id and the (gpu, bucket)
index): stored raw for the default 90 days it was most of the database. `telemetry_rollup1m_chunk`
and `telemetry_rollup1h_chunk` (migration 0008) hold a row per (gpu_id, period start): `buckets` (the rollup
rows it holds), `bucket` and one bytea per rollup field, each encoded with the readings' codec
(services/compression.py: little-endian, byte-shuffled, zlib; buckets as microseconds delta-coded,
counts as integers, statistics as the 4-byte reals they are stored as, a minute's mean of an
integer metric as its sum, the energy maximum's float bits delta-coded). Decoded, every value is
exactly the one the row held.

`rollups_compress` (hourly, from telemetry_prune_task, after the readings') converts the rollup
rows of the UTC days wholly before compression.compress_before(now) (READINGS_COMPRESS_AFTER_HOURS,
and nothing the pipeline still needs), one GPU and period per transaction (a month of hours
takes each day's as it comes, merged): the chunk written and the
raw rows it took deleted together (by id: a row the rollups stage writes meanwhile stays raw), so
a crash leaves either. A run that took a good part of a raw table (a day of every GPU) rebuilds
its indexes concurrently, so the pages of the rows it took go back to the disk.

A late reading into a compressed day makes the rollups stage write its minute and hour again, as
raw rows: readers (telemetry.store.rollups_of) take a raw row over the compressed value of the
same bucket, and the next run merges it into the chunk. An hour is built from its minutes raw and
compressed alike (services/rollups.py). Retention deletes minutes by whole days: one row per GPU
and day.

SQLite keeps raw rollup rows only: every function here does nothing there.
"""

from __future__ import annotations

import datetime as dt
import struct

from django.db import connection, transaction
from django.utils import timezone

from portal.core import engine
from portal.telemetry.models import (
    ROLLUP_HOUR_FIELDS,
    ROLLUP_METRICS,
    ROLLUP_MINUTE_FIELDS,
    Rollup1h,
    Rollup1hChunk,
    Rollup1m,
    Rollup1mChunk,
)
from portal.telemetry.services import compression, partitions

DAY = dt.timedelta(days=1)


class _Resolution:
    """A rollup table and its chunks: a row per GPU and `period` (a UTC "day" or "month")."""

    def __init__(self, name: str, model, chunk_model, fields: tuple[str, ...], period: str):
        self.name, self.fields, self.period = name, fields, period
        self.table, self.chunk_table = model._meta.db_table, chunk_model._meta.db_table
        self.columns = ("bucket", *fields)  # a chunk's encoded columns, in its order
        self.longest = DAY if period == "day" else dt.timedelta(days=31)

    def start_of(self, moment: dt.datetime) -> dt.datetime:
        """The start of the period holding `moment`."""
        day = _day(moment)
        return day if self.period == "day" else day.replace(day=1)

    def end_of(self, start: dt.datetime) -> dt.datetime:
        if self.period == "day":
            return start + DAY
        return (start + dt.timedelta(days=32)).replace(day=1)


# Minutes a row per day (1,440 rows; retention deletes whole days), hours a row per month (up to
# 744: a row per day would hold 24, its per-column overhead as large as its values; a year of a
# GPU's hours is 12 rows to read).
RESOLUTIONS = {
    "1m": _Resolution("1m", Rollup1m, Rollup1mChunk, ROLLUP_MINUTE_FIELDS, "day"),
    "1h": _Resolution("1h", Rollup1h, Rollup1hChunk, ROLLUP_HOUR_FIELDS, "month"),
}


def kind(name: str):
    """How a rollup column is encoded."""
    if name == "bucket":
        return compression.TS
    if name == "energy_mj_max":
        return compression.GROWING
    if name.endswith(("_min", "_max", "_mean")):
        return compression.STAT
    return compression.INT  # the counts


# The mean of an integer metric over a minute is its sum over its known values' count (both in the
# row): stored as that sum, an integer with a few bits of noise where the mean's float has 23, and
# given back as the same 4-byte float. A column whose every mean does not come back exactly so
# (none that services/rollups.py writes) is stored as floats. Marked by its first byte.
_SUMMED = {f"{metric}_mean": f"{metric}_count" for metric in ROLLUP_METRICS if metric != "power_w"}
_SUM_MARK = b"S"
_FLOAT4 = struct.Struct("f")


def _float4(value: float) -> float:
    return _FLOAT4.unpack(_FLOAT4.pack(value))[0]


def _as_sums(means: list, counts: list) -> list | None:
    sums = []
    for mean, count in zip(means, counts, strict=True):
        if mean is None:
            sums.append(None)
            continue
        if not count:
            return None
        total = round(mean * count)
        if _float4(total / count) != _float4(mean):
            return None
        sums.append(total)
    return sums


def _encode(res: _Resolution, columns: dict[str, list]) -> list[bytes]:
    """A chunk's columns (res.columns order) from their values (bucket in microseconds)."""
    blobs = []
    for name in res.columns:
        if res.name == "1m" and name in _SUMMED:
            sums = _as_sums(columns[name], columns[_SUMMED[name]])
            if sums is not None:
                blobs.append(_SUM_MARK + compression.encode_values(compression.COUNTER, sums))
                continue
        blobs.append(compression.encode_values(kind(name), columns[name]))
    return blobs


def _decode(name: str, blob: bytes, count: int, blobs: dict[str, bytes]) -> list:
    """One column of a chunk; a mean stored as sums divides them by its count column (in `blobs`)."""
    blob = bytes(blob)
    if blob[:1] != _SUM_MARK:
        return compression.decode(kind(name), blob, count)
    sums = compression.decode(compression.COUNTER, blob[1:], count)
    counts = compression.decode(kind(_SUMMED[name]), blobs[_SUMMED[name]], count)
    means = [None if total is None else _float4(total / known) for total, known in zip(sums, counts, strict=True)]
    return compression.float4_as_read(means)


def enabled() -> bool:
    return compression.enabled()


def _day(moment: dt.datetime) -> dt.datetime:
    moment = moment.astimezone(dt.UTC)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


# Reading ------------------------------------------------------------------------------------------


def chunk_rollups(
    resolution: str, gpu_ids: list[int], start: dt.datetime | None, end: dt.datetime | None, columns: tuple[str, ...]
) -> list[tuple]:
    """The compressed rollups of these GPUs with start <= bucket < end (None: no bound) as tuples
    of `columns` ("gpu_id", "bucket", rollup fields), in (gpu_id, bucket) order. Decodes only the
    columns asked for."""
    if not gpu_ids or not engine.compressed_history():
        return []
    res = RESOLUTIONS[resolution]
    wanted = [name for name in columns if name != "gpu_id"]
    if resolution == "1m":  # a mean stored as sums needs its count column
        wanted += [_SUMMED[name] for name in wanted if name in _SUMMED]
    wanted = list(dict.fromkeys(["bucket", *wanted]))
    where, params = ["gpu_id = ANY(%s)"], [list(gpu_ids)]
    if start is not None:
        where.append("start > %s")
        params.append(start - res.longest)
    if end is not None:
        where.append("start < %s")
        params.append(end)
    lo = None if start is None else compression.micros(start)
    hi = None if end is None else compression.micros(end)
    out = []
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT gpu_id, buckets, {', '.join(wanted)} FROM {res.chunk_table} WHERE {' AND '.join(where)} "
            "ORDER BY gpu_id, start",
            params,
        )
        for gpu_id, count, *blobs in cursor.fetchall():
            stored = dict(zip(wanted, blobs, strict=True))
            decoded = {name: _decode(name, blob, count, stored) for name, blob in stored.items()}
            keep = [
                position
                for position, micros in enumerate(decoded["bucket"])
                if (lo is None or micros >= lo) and (hi is None or micros < hi)
            ]
            if not keep:
                continue
            decoded["bucket"] = [compression.moment(micros) for micros in decoded["bucket"]]
            decoded["gpu_id"] = [gpu_id] * count
            picked = [decoded[name] for name in columns]
            out += [tuple(values[position] for values in picked) for position in keep]
    return out


def chunk_gpus(resolution: str, spans: list[tuple[int, dt.datetime, dt.datetime]]) -> set[int]:
    """The GPUs of these (gpu_id, lo, hi) spans with a compressed period overlapping their span."""
    if not spans or not engine.compressed_history():
        return set()
    res = RESOLUTIONS[resolution]
    gpu_ids, los, his = (list(column) for column in zip(*spans, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT c.gpu_id FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) "
            f"AS spans (gpu_id, lo, hi) JOIN {res.chunk_table} c ON c.gpu_id = spans.gpu_id "
            f"AND c.start > spans.lo - interval '1 {res.period}' AND c.start < spans.hi",
            [gpu_ids, los, his],
        )
        return {row[0] for row in cursor.fetchall()}


# Compressing --------------------------------------------------------------------------------------


def compress_gpu_period(resolution: str, gpu_id: int, start: dt.datetime, before: dt.datetime | None = None) -> int:
    """Compress one GPU's raw rollup rows of the period from `start` (before `before`, if given)
    into its chunk, in one transaction: the chunk written (merged with the one already there: a
    raw row wins over the compressed value of its bucket) and the raw rows deleted. Returns the
    raw rows compressed."""
    res = RESOLUTIONS[resolution]
    fields = ", ".join(res.fields)
    end = res.end_of(start) if before is None else min(res.end_of(start), before)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, bucket, {fields} FROM {res.table} WHERE gpu_id = %s AND bucket >= %s AND bucket < %s "
            "ORDER BY bucket FOR UPDATE",
            [gpu_id, start, end],
        )
        raw = cursor.fetchall()
        if not raw:
            return 0
        cursor.execute(
            f"SELECT buckets, {', '.join(res.columns)} FROM {res.chunk_table} "
            "WHERE gpu_id = %s AND start = %s FOR UPDATE",
            [gpu_id, start],
        )
        existing = cursor.fetchone()
        rows = {}
        if existing is not None:
            count, *blobs = existing
            stored = dict(zip(res.columns, blobs, strict=True))
            decoded = [_decode(name, blob, count, stored) for name, blob in stored.items()]
            rows = {row[0]: row for row in zip(*decoded, strict=True)}
        for _, bucket, *values in raw:
            rows[compression.micros(bucket)] = (compression.micros(bucket), *values)
        ordered = [rows[key] for key in sorted(rows)]
        blobs = _encode(res, {name: [row[position] for row in ordered] for position, name in enumerate(res.columns)})
        cursor.execute(
            f"INSERT INTO {res.chunk_table} (gpu_id, start, buckets, {', '.join(res.columns)}) "
            f"VALUES (%s, %s, %s, {', '.join(['%s'] * len(res.columns))}) "
            f"ON CONFLICT (gpu_id, start) DO UPDATE SET buckets = excluded.buckets, "
            + ", ".join(f"{name} = excluded.{name}" for name in res.columns),
            [gpu_id, start, len(ordered), *blobs],
        )
        cursor.execute(f"DELETE FROM {res.table} WHERE id = ANY(%s)", [[row[0] for row in raw]])
    return len(raw)


def compress_before(now: dt.datetime) -> dt.datetime:
    """Rollups of the UTC days wholly before this may be compressed: the readings' cutoff
    (READINGS_COMPRESS_AFTER_HOURS, nothing the pipeline still needs), down to a day."""
    return _day(compression.compress_before(now))


def rollups_compress(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Compress every raw 1-minute and 1-hour rollup row of the days before compress_before(now),
    a GPU and period per transaction (hours: into their month's chunk, a day at a time). Rerun,
    it finds nothing to do."""
    if not enabled():
        return {"rollups_1m": 0, "rollups_1h": 0}
    before = compress_before(now or timezone.now())
    done = {}
    for name, res in RESOLUTIONS.items():
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT gpu_id, date_trunc('{res.period}', bucket AT TIME ZONE 'UTC') FROM {res.table} "
                "WHERE bucket < %s GROUP BY 1, 2 ORDER BY 2, 1",
                [before],
            )
            spans = cursor.fetchall()
        done[f"rollups_{name}"] = sum(
            compress_gpu_period(name, gpu_id, start.replace(tzinfo=dt.UTC), before) for gpu_id, start in spans
        )
        if done[f"rollups_{name}"]:
            _indexes_renew(res, done[f"rollups_{name}"])
    return done


# A run that took at least this share of a raw table's rows (a whole day of every GPU, not a late
# reading's minutes) rebuilds its indexes.
RENEW_SHARE = 0.1


def _indexes_renew(res: _Resolution, compressed: int) -> bool:
    """Rebuild a raw rollup table's indexes once a run has emptied a good part of it: the deleted
    rows' index pages are otherwise kept at the table's high-water mark (a day of every GPU's
    minutes: 9 bytes a reading) until new rows reuse them. CONCURRENTLY outside a transaction: the
    rollups stage keeps writing meanwhile. Returns whether it rebuilt."""
    with connection.cursor() as cursor:
        # Counted (the planner's estimate may predate the whole day written): an index-only scan.
        cursor.execute(f"SELECT count(*) FROM {res.table}")
        if compressed < RENEW_SHARE * (compressed + cursor.fetchone()[0]):
            return False
        partitions.table_indexes_rebuild(cursor, res.table)
    return True


def chunks_prune(resolution: str, before: dt.datetime, *, chunk: int = 10_000) -> int:
    """Delete the compressed periods wholly before `before` (retention: a row per GPU and day for
    minutes); returns the rollup rows they held."""
    if not enabled():
        return 0
    res = RESOLUTIONS[resolution]
    table = res.chunk_table
    deleted = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE (gpu_id, start) IN (SELECT gpu_id, start FROM {table} "
                "WHERE start <= %s LIMIT %s) RETURNING buckets",
                [before - res.longest, chunk],
            )
            rows = cursor.fetchall()
        deleted += sum(row[0] for row in rows)
        if len(rows) < chunk:
            return deleted


def chunks_restore_all() -> int:
    """Every compressed period back into raw rollup rows (migrating back), a GPU per transaction;
    returns the rows restored."""
    if not engine.compressed_history():
        return 0
    restored = 0
    for name, res in RESOLUTIONS.items():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT DISTINCT gpu_id FROM {res.chunk_table}")
            gpu_ids = [row[0] for row in cursor.fetchall()]
        columns = ("gpu_id", *res.columns)
        for gpu_id in gpu_ids:
            rows = chunk_rollups(name, [gpu_id], None, None, columns)
            with transaction.atomic(), connection.cursor() as cursor:
                # A raw row of the same bucket is the newer value: it stays.
                cursor.executemany(
                    f"INSERT INTO {res.table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
                    "ON CONFLICT (gpu_id, bucket) DO NOTHING",
                    rows,
                )
                cursor.execute(f"DELETE FROM {res.chunk_table} WHERE gpu_id = %s", [gpu_id])
            restored += len(rows)
    return restored
