"""Finished readings stored compressed, one row per GPU and hour, on PostgreSQL.

A raw reading costs about 60 bytes before its first value (tuple header, line pointer, key index
entry); stored as a column of values per GPU-hour, as TimescaleDB's compression does, it costs
little more than its values' entropy. `telemetry_chunk` (migration 0005) holds a row per
(gpu_id, hour): `count`, and one bytea per reading column (`ts` and every metric), each encoded
here and compressed with zlib:

- the values in time order as the database sends them (int2send, float4send, ...: big-endian),
  timestamps as microseconds since the epoch delta-coded, the energy counter's float bits XORed
  with the previous reading's (nearby values share their high bits), counters as bigint and
  booleans as 0/1;
- little-endian, byte-shuffled (all first bytes, then all second bytes...): sensor values share
  their high bytes, which then compress to almost nothing;
- a first byte says whether the column has no NULL (0), only NULLs (1: nothing follows) or some
  (2: a byte per reading, 1 where NULL, precedes the values).

The columns are stored EXTERNAL (out of line, not compressed again by PostgreSQL).

`readings_compress` (hourly, from telemetry_prune_task) converts the readings older than
READINGS_COMPRESS_AFTER_HOURS and older than anything a pipeline stage still needs
(ledger.oldest_pending_reading, as retention respects), one GPU and day per transaction: the chunks
written (merged with the chunk already there, when a late reading came in for a compressed hour)
and the raw rows deleted together, so a crash leaves either. A day partition left empty is then
dropped and created again empty (no dead rows for vacuum; ingest may still write late readings
to it). Readers get raw and compressed readings alike through telemetry.store (the one door).

SQLite keeps raw readings only: every function here does nothing there. On PostgreSQL the readers
query the chunk table whenever they read readings (one index probe on (gpu_id, start)): it exists
from migration 0005 on.
"""

from __future__ import annotations

import datetime as dt
import struct
import sys
import zlib
from array import array

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from portal.core import engine
from portal.telemetry import ledger, metrics
from portal.telemetry.columns import READING_ROW_COLUMNS
from portal.telemetry.services import partitions

TABLE = "telemetry_chunk"
HOUR = dt.timedelta(hours=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_SWAP = sys.byteorder == "little"  # the send functions are big-endian
_BIG = sys.byteorder == "big"  # chunks are stored little-endian, whatever machine wrote them


class _Kind:
    """How one column is sent by the database, held in an array and told back apart."""

    def __init__(
        self, send: str, code: str, sql_type: str, cast: str = "", *, to_python=None, transform: str = "", as_read=None
    ):
        self.send, self.code, self.sql_type, self.cast = send, code, sql_type, cast
        self.to_python, self.transform, self.as_read = to_python, transform, as_read
        self.size = array(code).itemsize


_FLOAT4 = struct.Struct("f")


def float4_as_read(values: list) -> list:
    """4-byte floats as a query reads them back: PostgreSQL sends a real as its shortest decimal
    that rounds to it ("57.516666"), which Python then reads as the nearest double, not the
    float's own value widened (57.516666412353516). Decoded values are made the same."""
    memo, out = {}, []
    for value in values:
        read = memo.get(value)
        if read is None:
            if value is None or value.is_integer():
                read = value
            else:
                for digits in (6, 7, 8, 9):  # a real has at least 6 significant digits exact
                    read = float(f"{value:.{digits}g}")
                    if _FLOAT4.unpack(_FLOAT4.pack(read))[0] == value:
                        break
            memo[value] = read
        out.append(read)
    return out


_SMALL = _Kind("int2send", "h", "smallint")
INT = _Kind("int4send", "i", "integer")
_REAL = _Kind("float4send", "f", "real")
# A rollup statistic: a real, read back as a query reads it (float4_as_read).
STAT = _Kind("float4send", "f", "real", as_read=float4_as_read)
COUNTER = _Kind("int8send", "q", "bigint", "::bigint")
_BOOL = _Kind("int2send", "h", "smallint", "::int", to_python=bool)
# Floats are stored as their bits, XORed with the previous value's (exact, unlike a difference).
_DOUBLE = _Kind("float8send", "q", "double precision", transform="xor")
TS = _Kind("int8send", "q", "bigint", transform="delta")
# A growing float (a counter's maximum): its bits delta-coded, wrapping (a positive double's bits,
# read as an integer, grow with it: the deltas are small where XORs of its low bits are not).
GROWING = _Kind("float8send", "q", "double precision", transform="bits")

_CODECS = {
    metrics.SMALL: _SMALL, metrics.INTEGER: INT, metrics.REAL: _REAL, metrics.DOUBLE: _DOUBLE,
    metrics.COUNTER: COUNTER, metrics.FLAG: _BOOL,
}  # fmt: skip
# Each stored column's encoding: the metrics' from the registry (portal/telemetry/metrics.py).
KINDS = {
    "ts": TS, **{metric.name: _CODECS[metric.codec] for metric in metrics.METRICS}, "xid_count": _SMALL, "job_set": INT,
}  # fmt: skip
COLUMNS = tuple(name for name in READING_ROW_COLUMNS if name != "gpu_id")
assert set(COLUMNS) == set(KINDS), "every reading column has an encoding"


def enabled() -> bool:
    return partitions.partitioned()


# Encoding ----------------------------------------------------------------------------------------


def _shuffle(raw: bytes, size: int) -> bytes:
    return b"".join(raw[byte::size] for byte in range(size)) if size > 1 else raw


def _unshuffle(data: bytes, size: int) -> bytes:
    if size == 1:
        return data
    out, step = bytearray(len(data)), len(data) // size
    for byte in range(size):
        out[byte::size] = data[byte * step : (byte + 1) * step]
    return bytes(out)


def _forward(values: array, transform: str) -> array:
    if not transform or not values:
        return values
    mask = (1 << 64) - 1
    out, previous = array("q"), 0
    for value in values:
        coded = value ^ previous if transform == "xor" else value - previous
        if transform == "bits":
            coded &= mask
        out.append(coded - (1 << 64) if coded > mask >> 1 else coded)  # back into a signed 64-bit
        previous = value
    return out


def _backward(values: array, transform: str) -> list[int]:
    if not transform:
        return values.tolist()
    out, previous = [], 0
    for coded in values:
        if transform == "bits":
            previous = ((previous + coded + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)
        else:
            previous = previous + coded if transform == "delta" else previous ^ coded
        out.append(previous)
    return out


def encode(kind: _Kind, sent: bytes, nulls: str) -> bytes:
    """One column of a chunk: the values as the database sent them (big-endian, NULLs as 0) and
    a '0'/'1' per reading, '1' where NULL."""
    if "0" not in nulls:
        return b"\x01"
    values = array(kind.code, sent)
    if _SWAP:
        values.byteswap()
    values = _forward(values, kind.transform)
    if _BIG:
        values.byteswap()
    body = _shuffle(values.tobytes(), kind.size)
    if "1" in nulls:
        return b"\x02" + zlib.compress(nulls.translate(_MASK).encode() + body)
    return b"\x00" + zlib.compress(body)


_MASK = str.maketrans("01", "\x00\x01")


def decode(kind: _Kind, blob: bytes, count: int) -> list:
    """The values of one column of a chunk, None where NULL (ts as microseconds since the epoch)."""
    blob = bytes(blob)
    if blob[0] == 1:
        return [None] * count
    data = zlib.decompress(blob[1:])
    mask = None
    if blob[0] == 2:
        mask, data = data[:count], data[count:]
    stored = array(kind.code, _unshuffle(data, kind.size))
    if _BIG:
        stored.byteswap()
    values = _backward(stored, kind.transform)
    if kind.transform in ("xor", "bits"):
        values = array("d", array("q", values).tobytes()).tolist()
    if kind.to_python is not None:
        values = [kind.to_python(value) for value in values]
    if kind.as_read is not None:
        values = kind.as_read(values)
    if mask is not None:
        values = [None if null else value for value, null in zip(values, mask, strict=True)]
    return values


def micros(moment: dt.datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def moment(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)


# Reading ------------------------------------------------------------------------------------------


def chunk_readings(
    gpu_ids: list[int],
    start: dt.datetime | None,
    end: dt.datetime | None,
    columns: tuple[str, ...],
    *,
    start_open: bool = False,
    end_closed: bool = False,
    descending: bool = False,
    limit: int | None = None,
    epoch: bool = False,
) -> list[tuple]:
    """The compressed readings of these GPUs between start and end (start included unless
    start_open, end excluded unless end_closed; None: no bound) as tuples of `columns`
    (READING_ROW_COLUMNS names), in (gpu_id, ts) order or reversed (descending). Decodes only the
    columns asked for, and with a limit only the chunks needed to reach it. `epoch`: ts as
    seconds since the epoch (a float), not a datetime."""
    if not gpu_ids or not engine.compressed_history():
        return []
    stored = [name for name in columns if name != "gpu_id"]
    wanted = list(dict.fromkeys(["ts", *stored]))
    where, params = ["gpu_id = ANY(%s)"], [list(gpu_ids)]
    if start is not None:
        where.append("start > %s")
        params.append(start - HOUR)
    if end is not None:
        where.append("start <= %s" if end_closed else "start < %s")
        params.append(end)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT gpu_id, count, {', '.join(wanted)} FROM {TABLE} WHERE {' AND '.join(where)} "
            + ("ORDER BY gpu_id DESC, start DESC" if descending else "ORDER BY gpu_id, start"),
            params,
        )
        out = []
        while limit is None or len(out) < limit:
            chunks = cursor.fetchmany(1 if limit is not None else 1000)
            if not chunks:
                break
            out += _decoded(chunks, wanted, columns, start, end, start_open, end_closed, descending, epoch)
    return out if limit is None else out[:limit]


def _decoded(chunks, wanted, columns, start, end, start_open, end_closed, descending, epoch) -> list[tuple]:
    lo = None if start is None else micros(start)
    hi = None if end is None else micros(end)
    out = []
    for gpu_id, count, *blobs in chunks:
        decoded = {name: decode(KINDS[name], blob, count) for name, blob in zip(wanted, blobs, strict=True)}
        keep = [
            position
            for position, micros in enumerate(decoded["ts"])
            if (lo is None or micros > lo or (micros == lo and not start_open))
            and (hi is None or micros < hi or (micros == hi and end_closed))
        ]
        if not keep:
            continue
        decoded["ts"] = [micros / 1e6 if epoch else moment(micros) for micros in decoded["ts"]]
        decoded["gpu_id"] = [gpu_id] * count
        picked = [decoded[name] for name in columns]
        if descending:
            keep.reverse()
        out += [tuple(values[position] for values in picked) for position in keep]
    return out


# Compressing --------------------------------------------------------------------------------------


def compress_before(now: dt.datetime) -> dt.datetime:
    """Readings before this may be compressed: older than READINGS_COMPRESS_AFTER_HOURS, and not
    needed raw by the pipeline (its pending batches: telemetry.ledger); a whole hour."""
    cutoff = now - dt.timedelta(hours=settings.READINGS_COMPRESS_AFTER_HOURS)
    needed = ledger.oldest_pending_reading()
    if needed is not None:
        cutoff = min(cutoff, needed)
    return cutoff.replace(minute=0, second=0, microsecond=0)


def _select_sql() -> str:
    sent = ", ".join(
        f"string_agg({kind.send}(coalesce({name}{kind.cast}, 0)::{kind.sql_type}), ''::bytea ORDER BY ts)"
        for name, kind in KINDS.items()
        if name != "ts"
    )
    nulls = " || ".join(f"({name} IS NULL)::int::text" for name in KINDS if name != "ts")
    return f"""SELECT date_trunc('hour', ts) AS hour, count(*),
        string_agg(int8send(((extract(epoch FROM ts) * 1000000)::bigint)), ''::bytea ORDER BY ts),
        {sent}, string_agg({nulls}, '' ORDER BY ts)
        FROM {partitions.TABLE} WHERE gpu_id = %s AND ts >= %s AND ts < %s GROUP BY 1 ORDER BY 1"""


def _encode_hour(sent: list[bytes], nulls: str, count: int) -> list[bytes]:
    names = [name for name in KINDS if name != "ts"]
    width = len(names)
    blobs = [encode(TS, sent[0], "0" * count)]
    blobs += [encode(KINDS[name], sent[1 + n], nulls[n::width]) for n, name in enumerate(names)]
    return blobs


def _merged_hour(existing: tuple, raw_rows: list[tuple]) -> tuple[int, list[bytes]]:
    """A stored chunk with raw readings of the same hour added (a late reading): every column
    decoded, merged in time order (a reading at an instant already compressed is dropped, as a
    second reading of a GPU at one instant always is) and encoded again."""
    count, blobs = existing[0], existing[1:]
    old = list(zip(*(decode(KINDS[name], blob, count) for name, blob in zip(COLUMNS, blobs, strict=True)), strict=True))
    seen = {row[0] for row in old}
    rows = sorted(old + [row for row in raw_rows if row[0] not in seen], key=lambda row: row[0])
    return len(rows), _encode_rows(rows)


def encode_values(kind: _Kind, values: list) -> bytes:
    """One column of a chunk from Python values (None where NULL; ts as microseconds since the
    epoch), encoded exactly as from the database's send functions."""
    nulls = "".join("1" if value is None else "0" for value in values)
    if kind.transform in ("xor", "bits"):
        packed = array("q", array("d", [0.0 if v is None else v for v in values]).tobytes())
    else:
        packed = array(kind.code, [0 if v is None else int(v) if kind.to_python else v for v in values])
    if _SWAP:
        packed.byteswap()
    return encode(kind, packed.tobytes(), nulls)


def _encode_rows(rows: list[tuple]) -> list[bytes]:
    """Encode decoded rows (ts in microseconds, COLUMNS order) as a chunk's columns."""
    return [encode_values(KINDS[name], [row[position] for row in rows]) for position, name in enumerate(COLUMNS)]


def _raw_rows(cursor, gpu_id: int, start: dt.datetime, end: dt.datetime) -> list[tuple]:
    cursor.execute(
        f"SELECT (extract(epoch FROM ts) * 1000000)::bigint, {', '.join(COLUMNS[1:])} FROM {partitions.TABLE} "
        "WHERE gpu_id = %s AND ts >= %s AND ts < %s ORDER BY ts",
        [gpu_id, start, end],
    )
    return [
        tuple(int(v) if name in _COUNTERS and v is not None else v for name, v in zip(COLUMNS, row, strict=True))
        for row in cursor.fetchall()
    ]


_COUNTERS = {name for name, kind in KINDS.items() if kind is COUNTER}
_INSERT = (
    f"INSERT INTO {TABLE} (gpu_id, start, count, {', '.join(COLUMNS)}) "
    f"VALUES (%s, %s, %s, {', '.join(['%s'] * len(COLUMNS))})"
)


def compress_gpu_span(gpu_id: int, start: dt.datetime, end: dt.datetime) -> int:
    """Compress one GPU's raw readings in [start, end) (whole hours), in one transaction: the
    chunks written, the raw rows deleted. Returns the readings compressed."""
    done = 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_select_sql(), [gpu_id, start, end])
        hours = cursor.fetchall()
        if not hours:
            return 0
        cursor.execute(
            f"SELECT start, count, {', '.join(COLUMNS)} FROM {TABLE} WHERE gpu_id = %s AND start >= %s AND start < %s "
            "FOR UPDATE",
            [gpu_id, start, end],
        )
        existing = {row[0]: row[1:] for row in cursor.fetchall()}
        inserts = []
        for hour, count, *rest in hours:
            done += count
            if hour in existing:
                count, blobs = _merged_hour(existing[hour], _raw_rows(cursor, gpu_id, hour, hour + HOUR))
                cursor.execute(f"DELETE FROM {TABLE} WHERE gpu_id = %s AND start = %s", [gpu_id, hour])
            else:
                blobs = _encode_hour(rest[:-1], rest[-1], count)
            inserts.append((gpu_id, hour, count, *blobs))
        cursor.executemany(_INSERT, inserts)
        cursor.execute(
            f"DELETE FROM {partitions.TABLE} WHERE gpu_id = %s AND ts >= %s AND ts < %s", [gpu_id, start, end]
        )
    return done


def _empty_partitions_renew(before: dt.datetime, now: dt.datetime) -> list[str]:
    """Day partitions wholly before `before` left without a row: dropped (their dead rows with
    them) and, when ingest may still write to their day, created again empty. Locked first, so a
    late reading inserted meanwhile is never lost."""
    renewed = []
    needed = set(partitions.days_needed(now))
    for name, (day_start, day_end) in sorted(partitions.reading_partitions().items(), key=lambda item: item[1]):
        if day_end > before:
            continue
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_relation_size(%s) = 0", [name])
            if cursor.fetchone()[0]:
                continue  # created empty (or renewed already): nothing to reclaim
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {name})")
            if cursor.fetchone()[0]:
                continue
        with transaction.atomic(), connection.cursor() as cursor:
            # The parent first, as an insert locks them (DROP locks both): no deadlock with ingest.
            cursor.execute(f"LOCK TABLE {partitions.TABLE}, {name} IN ACCESS EXCLUSIVE MODE")
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {name})")
            if cursor.fetchone()[0]:
                continue
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"DROP TABLE {name}")
            if day_start.date() in needed:
                cursor.execute(partitions.create_partition_sql(day_start.date()))
        renewed.append(name)
    return renewed


def readings_compress(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Compress every raw reading before compress_before(now), a GPU and UTC day per transaction;
    then renew the day partitions left empty. Rerun, it finds nothing to do."""
    if not enabled():
        return {"readings": 0, "partitions": 0}
    now = now or timezone.now()
    before = compress_before(now)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT gpu_id, date_trunc('day', ts AT TIME ZONE 'UTC') FROM {partitions.TABLE} WHERE ts < %s "
            "GROUP BY 1, 2 ORDER BY 2, 1",
            [before],
        )
        spans = cursor.fetchall()
    done = 0
    for gpu_id, day in spans:
        day_start = day.replace(tzinfo=dt.UTC)
        done += compress_gpu_span(gpu_id, day_start, min(day_start + dt.timedelta(days=1), before))
    renewed = _empty_partitions_renew(before, now)
    return {"readings": done, "partitions": len(renewed)}


def chunks_prune(before: dt.datetime, *, chunk: int = 10_000) -> int:
    """Delete the chunks wholly before `before` (retention); returns the readings they held."""
    if not enabled():
        return 0
    deleted = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {TABLE} WHERE (gpu_id, start) IN (SELECT gpu_id, start FROM {TABLE} "
                "WHERE start <= %s LIMIT %s) RETURNING count",
                [before - HOUR, chunk],
            )
            rows = cursor.fetchall()
        deleted += sum(row[0] for row in rows)
        if len(rows) < chunk:
            return deleted


def chunks_restore_all() -> int:
    """Every chunk back into raw readings (migrating back), a GPU per transaction; returns the
    readings restored."""
    if not engine.compressed_history():
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT gpu_id FROM {TABLE}")
        gpu_ids = [row[0] for row in cursor.fetchall()]
        cursor.execute(f"SELECT DISTINCT (start AT TIME ZONE 'UTC')::date FROM {TABLE}")
        days = [row[0] for row in cursor.fetchall()]
    partitions.reading_partitions_ensure(days=days)
    restored = 0
    names = ", ".join(COLUMNS)
    for gpu_id in gpu_ids:
        rows = chunk_readings([gpu_id], None, None, ("gpu_id", *COLUMNS))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {partitions.TABLE} (gpu_id, {names}) VALUES ({', '.join(['%s'] * (len(COLUMNS) + 1))}) "
                "ON CONFLICT DO NOTHING",
                rows,
            )
            cursor.execute(f"DELETE FROM {TABLE} WHERE gpu_id = %s", [gpu_id])
        restored += len(rows)
    return restored


def chunk_count(gpu_id: int, start: dt.datetime, end: dt.datetime) -> int:
    """How many compressed readings one GPU has in [start, end): the counts of the chunks inside
    it, and the readings of the (at most two) chunks across its edges decoded."""
    if not engine.compressed_history() or end <= start:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT coalesce(sum(count), 0) FROM {TABLE} WHERE gpu_id = %s AND start >= %s AND start <= %s",
            [gpu_id, start, end - HOUR],
        )
        inside = int(cursor.fetchone()[0])
    first_whole = start if start == start.replace(minute=0, second=0, microsecond=0) else _hour_after(start)
    last_whole = end.replace(minute=0, second=0, microsecond=0)
    if first_whole >= last_whole:  # within one hour, or across one hour's edge
        return inside + len(chunk_readings([gpu_id], start, end, ("ts",)))
    edges = len(chunk_readings([gpu_id], start, first_whole, ("ts",))) if first_whole > start else 0
    edges += len(chunk_readings([gpu_id], last_whole, end, ("ts",))) if end > last_whole else 0
    return inside + edges


def _hour_after(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0) + HOUR


def chunk_hour_counts(spans: list[tuple[int, dt.datetime, dt.datetime]]) -> dict[tuple[int, dt.datetime], int]:
    """The compressed readings of each GPU-hour starting in the spans (gpu_id, lo, hi), lo <= hour
    < hi: {(gpu_id, hour): count}. One query."""
    if not spans or not engine.compressed_history():
        return {}
    with connection.cursor() as cursor:
        condition = " OR ".join(["(gpu_id = %s AND start >= %s AND start < %s)"] * len(spans))
        cursor.execute(
            f"SELECT gpu_id, start, count FROM {TABLE} WHERE {condition}",
            [value for span in spans for value in span],
        )
        return {(gpu_id, start): count for gpu_id, start, count in cursor.fetchall()}
