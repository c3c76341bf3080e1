"""Incremental 1-minute and 1-hour rollups per GPU.

A stage of the pipeline (portal.telemetry.pipeline). The block a pass hands it holds every stored
reading of its hosts' GPUs within its batches' time spans, so a touched minute is aggregated in
memory from the block, plus, from the raw readings, only the parts of the minute no batch of the
block covers (a gap between two batches, the ends of the minute before the first and after the
last): usually none. A minute's row is thus the aggregate of all its stored readings, whatever
order its batches came in. An hour is built from its minute rows (those just computed and the
stored ones of its other minutes), never from raw readings: the minute rows keep per-metric
counts for that, so that means over nullable metrics weigh each minute by its known values.
prepare() only reads and computes; the pass writes in its transaction.
"""

import datetime as dt
from bisect import bisect_left
from collections import defaultdict

from django.conf import settings
from django.db import connection
from django.utils import timezone

from portal.core import engine
from portal.telemetry import store
from portal.telemetry.columns import READING_ROW_COLUMNS, ROW_TS
from portal.telemetry.models import (
    ROLLUP_HOUR_FIELDS,
    ROLLUP_METRICS,
    ROLLUP_MINUTE_FIELDS,
    THERMAL_THROTTLE_MASK,
    Rollup1h,
    Rollup1m,
)
from portal.telemetry.pipeline import Prepared
from portal.telemetry.services import rollup_chunks

_HOUR_FIELDS = list(ROLLUP_HOUR_FIELDS)
_MINUTE_FIELDS = list(ROLLUP_MINUTE_FIELDS)
_SPANS_PER_STATEMENT = 300  # (GPU, start, end) rows in one statement's VALUES list (SQLite)
_MINUTE, _HOUR, _TICK = dt.timedelta(minutes=1), dt.timedelta(hours=1), dt.timedelta(microseconds=1)

# A partial aggregate is a list: count, thermal throttle count, XID count, energy max, then per
# metric (ROLLUP_METRICS order) its known values' count, sum, min and max.
_HEAD = 4
_P_ENERGY = READING_ROW_COLUMNS.index("energy_mj")
_P_THROTTLE = READING_ROW_COLUMNS.index("throttle_reasons")
_P_XID = READING_ROW_COLUMNS.index("xid_count")
_P_METRICS = [READING_ROW_COLUMNS.index(metric) for metric in ROLLUP_METRICS]

Span = tuple[dt.datetime, dt.datetime]  # [start, end)


def _minute(moment: dt.datetime) -> dt.datetime:
    return moment.replace(second=0, microsecond=0)


def _hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _merged(windows: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _minus(spans: list[Span], holes: list[Span]) -> list[Span]:
    """The parts of `spans` outside `holes` (both merged, sorted)."""
    out = []
    for start, end in spans:
        for lo, hi in holes:
            if hi <= start or lo >= end:
                continue
            if lo > start:
                out.append((start, lo))
            start = max(start, hi)
        if start < end:
            out.append((start, end))
    return out


def _moment(value) -> dt.datetime:
    """A bucket as a query gives it back (SQLite: text, or a naive UTC datetime from a column) as
    an aware datetime."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


# --- partial aggregates -------------------------------------------------------------------------


def _of_rows(cols: list[tuple], i: int, j: int) -> list:
    """The partial aggregate of rows i..j of a GPU's readings, transposed (cols[column][row])."""
    energy = [v for v in cols[_P_ENERGY][i:j] if v is not None]
    out = [
        j - i,
        sum(1 for reasons in cols[_P_THROTTLE][i:j] if reasons and reasons & THERMAL_THROTTLE_MASK),
        sum(cols[_P_XID][i:j]),
        max(energy) if energy else None,
    ]
    for position in _P_METRICS:
        values = cols[position][i:j]
        if None in values:
            values = [v for v in values if v is not None]
        if values:
            out += [len(values), sum(values), min(values), max(values)]
        else:
            out += [0, 0, None, None]
    return out


def _block_minutes(rows: list[tuple]) -> dict[dt.datetime, list]:
    """Minute → partial aggregate of one GPU's readings (stored rows, in time order)."""
    cols = list(zip(*rows, strict=True))
    stamps = cols[ROW_TS]
    out, i = {}, 0
    while i < len(stamps):
        minute = _minute(stamps[i])
        j = bisect_left(stamps, minute + _MINUTE, i)
        out[minute] = _of_rows(cols, i, j)
        i = j
    return out


def _lesser(a, b):
    return b if a is None else a if b is None else min(a, b)


def _greater(a, b):
    return b if a is None else a if b is None else max(a, b)


def _add(into: list, other: list) -> None:
    into[0] += other[0]
    into[1] += other[1]
    into[2] += other[2]
    into[3] = _greater(into[3], other[3])
    for k in range(_HEAD, len(into), 4):
        into[k] += other[k]
        into[k + 1] += other[k + 1] or 0
        into[k + 2] = _lesser(into[k + 2], other[k + 2])
        into[k + 3] = _greater(into[k + 3], other[k + 3])


def _row(partial: list, *, counts: bool) -> list:
    """A rollup row's values (_MINUTE_FIELDS, or _HOUR_FIELDS without the per-metric counts)."""
    stats, known = [], []
    for k in range(_HEAD, len(partial), 4):
        n, total, low, high = partial[k : k + 4]
        stats += [low, high, total / n if n else None]
        known.append(n)
    return [*partial[:_HEAD], *stats, *(known if counts else ())]


# --- queries ------------------------------------------------------------------------------------


def _bucket_sql(column: str, width: dt.timedelta) -> str:
    """The start of the minute or hour a timestamp column falls in, as the column stores it."""
    return engine.truncate_sql(column, "minute" if width == _MINUTE else "hour")


def _raw_sql() -> list[str]:
    """The partial aggregate of raw readings (alias r), as _of_rows computes it."""
    out = [
        "COUNT(*)",
        # Bitwise AND is spelled alike on PostgreSQL and SQLite.
        f"COUNT(CASE WHEN (r.throttle_reasons & {THERMAL_THROTTLE_MASK}) > 0 THEN 1 END)",
        "COALESCE(SUM(r.xid_count), 0)",
        "MAX(r.energy_mj)",
    ]
    for metric in ROLLUP_METRICS:
        out += [
            f"COUNT(r.{metric})",
            f"SUM({engine.double_sql(f'r.{metric}')})",
            f"MIN(r.{metric})",
            f"MAX(r.{metric})",
        ]
    return out


def _minutes_sql() -> list[str]:
    """The partial aggregate of minute rows (alias r): their counts, and the sums their means and
    per-metric counts give back."""
    out = ["SUM(r.count)", "SUM(r.thermal_throttle_count)", "SUM(r.xid_count)", "MAX(r.energy_mj_max)"]
    for metric in ROLLUP_METRICS:
        out += [
            f"SUM(r.{metric}_count)",
            f"SUM({engine.double_sql(f'r.{metric}_mean')} * r.{metric}_count)",
            f"MIN(r.{metric}_min)",
            f"MAX(r.{metric}_max)",
        ]
    return out


def _span_sources(spans: list[tuple[int, dt.datetime, dt.datetime]]):
    """(FROM item naming `spans (gpu_id, lo, hi)`, its params) for these (GPU id, start, end)
    spans: on PostgreSQL one unnest() of three arrays, whatever their number (a long VALUES
    list or OR chain costs more to plan than to run); on SQLite VALUES lists of up to
    _SPANS_PER_STATEMENT rows."""
    if engine.array_parameters():
        if spans:
            gpu_ids, los, his = (list(column) for column in zip(*spans, strict=True))
            yield "unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) AS spans (gpu_id, lo, hi)", [
                gpu_ids, los, his,
            ]  # fmt: skip
        return
    adapt = connection.ops.adapt_datetimefield_value
    for first in range(0, len(spans), _SPANS_PER_STATEMENT):
        part = spans[first : first + _SPANS_PER_STATEMENT]
        values = ", ".join(["(%s, %s, %s)"] * len(part))
        yield (
            f"(WITH spans (gpu_id, lo, hi) AS (VALUES {values}) SELECT * FROM spans) AS spans",
            [value for gpu_id, lo, hi in part for value in (gpu_id, adapt(lo), adapt(hi))],
        )


def _within(source: str, table: str, column: str) -> str:
    """FROM items: the rows (alias r) of `table` whose GPU is a span's and whose `column` is within
    it. PostgreSQL: looked up span by span (the subquery kept apart by OFFSET 0), as its planner,
    not knowing how short the spans are, would rather merge-join the whole table."""
    condition = f"r.gpu_id = spans.gpu_id AND r.{column} >= spans.lo AND r.{column} < spans.hi"
    if engine.lateral_joins():
        return f"{source} CROSS JOIN LATERAL (SELECT * FROM {table} r WHERE {condition} OFFSET 0) r"
    return f"{source} JOIN {table} r ON {condition}"


def _partials(table: str, column: str, width: dt.timedelta, spans: list[tuple[int, dt.datetime, dt.datetime]],
              aggregates: list[str]) -> dict[tuple[int, dt.datetime], list]:  # fmt: skip
    """(GPU id, bucket) → partial aggregate of the rows of `table` within these (GPU id, start,
    end) spans, per bucket of `width` of their `column`; the spans of one GPU must not overlap."""
    bucket = _bucket_sql(f"r.{column}", width)
    out = {}
    with connection.cursor() as cursor:
        for source, params in _span_sources(spans):
            cursor.execute(
                f"SELECT r.gpu_id, {bucket}, {', '.join(aggregates)} FROM {_within(source, table, column)} "
                f"GROUP BY r.gpu_id, {bucket}",
                params,
            )
            for gpu_id, key, *partial in cursor.fetchall():
                for k in range(_HEAD + 1, len(partial), 4):
                    partial[k] = partial[k] or 0  # the sum of no values
                out[gpu_id, _moment(key)] = partial
    return out


def _stored_minutes(spans: list[tuple[int, dt.datetime, dt.datetime]]) -> list[tuple[int, int, dt.datetime]]:
    """(id, GPU id, bucket) of the minute rows within these spans."""
    rows = []
    with connection.cursor() as cursor:
        for source, params in _span_sources(spans):
            cursor.execute(
                f"SELECT r.id, r.gpu_id, r.bucket FROM {_within(source, Rollup1m._meta.db_table, 'bucket')}", params
            )
            rows += [(pk, gpu_id, _moment(bucket)) for pk, gpu_id, bucket in cursor.fetchall()]
    return rows


def _of_minute(values) -> list:
    """The partial aggregate of one minute row (_MINUTE_FIELDS order), as _minutes_sql sums them."""
    stats, known = values[_HEAD : _HEAD + 3 * len(ROLLUP_METRICS)], values[_HEAD + 3 * len(ROLLUP_METRICS) :]
    out = list(values[:_HEAD])
    for position, n in enumerate(known):
        low, high, mean = stats[3 * position : 3 * position + 3]
        out += [n, 0 if mean is None else mean * n, low, high]
    return out


def _minute_partials(spans: list[tuple[int, dt.datetime, dt.datetime]]) -> dict[tuple[int, dt.datetime], list]:
    """(GPU id, hour) → partial aggregate of the stored minute rows within these (GPU id, start,
    end) spans, raw and compressed alike: summed in the database, or, for a GPU with a compressed
    day in its spans (services/rollup_chunks.py: a late batch into a day already compressed,
    rare), from its rows as telemetry.store.rollups_of gives them."""
    packed = rollup_chunks.chunk_gpus("1m", spans)
    out = _partials(Rollup1m._meta.db_table, "bucket", _HOUR, [s for s in spans if s[0] not in packed], _minutes_sql())
    if packed:
        for gpu_id, lo, hi in spans:
            if gpu_id not in packed:
                continue
            for bucket, *values in store.rollups_of(
                gpu_ids=[gpu_id], resolution="1m", columns=("bucket", *_MINUTE_FIELDS), start=lo, end=hi
            ):
                partial, key = _of_minute(values), (gpu_id, _hour(bucket))
                if key in out:
                    _add(out[key], partial)
                else:
                    out[key] = partial
    return out


# --- computing and writing ----------------------------------------------------------------------


def _compute(touched: dict[int, list[Span]], gaps: dict[int, list[Span]], readings: dict[int, list[tuple]]):
    """The rollups of the `touched` minutes (GPU id → merged minute-aligned spans) and the hours
    around them: their readings are `readings` (GPU id → stored rows in time order, every stored
    one within the touched spans except those in `gaps`) plus the raw readings in `gaps`.
    Returns what _write writes. Reads only."""
    # A JIT compilation of the three dozen aggregates took 0.8 s for a query that runs in 40 ms.
    with engine.without_jit():
        return _computed(touched, gaps, readings)


def _compressed(touched: dict[int, list[Span]]) -> set[int]:
    """The GPUs with compressed readings (services/compression.py) in the hours of their touched
    spans: a late batch into a day already compressed, rare. Only hours older than
    READINGS_COMPRESS_AFTER_HOURS can be, so fresh batches cost no query."""
    compressed_before = timezone.now() - dt.timedelta(hours=settings.READINGS_COMPRESS_AFTER_HOURS) + _HOUR
    old = [(gpu_id, _hour(lo), hi) for gpu_id, spans in touched.items() for lo, hi in spans if lo < compressed_before]
    return store.gpus_with_compressed_hours(old)


def _computed(touched, gaps, readings):
    minutes: dict[tuple[int, dt.datetime], list] = {}
    # A GPU with compressed readings in its touched minutes: the minutes from all their readings,
    # raw and compressed (the block and the gaps hold raw readings only).
    packed = _compressed(touched)
    if packed:
        for gpu_id in packed:
            for lo, hi in touched[gpu_id]:
                rows = store.readings_of(gpu_ids=[gpu_id], columns=READING_ROW_COLUMNS, start=lo, end=hi)
                if rows:
                    for minute, partial in _block_minutes(rows).items():
                        minutes[gpu_id, minute] = partial
        readings = {gpu_id: rows for gpu_id, rows in readings.items() if gpu_id not in packed}
        gaps = {gpu_id: spans for gpu_id, spans in gaps.items() if gpu_id not in packed}
    for gpu_id, rows in readings.items():
        if gpu_id in touched:
            for minute, partial in _block_minutes(rows).items():
                minutes[gpu_id, minute] = partial
    gap_spans = [(gpu_id, lo, hi) for gpu_id, spans in gaps.items() for lo, hi in spans]
    for key, partial in _partials(store.RAW_TABLE, "ts", _MINUTE, gap_spans, _raw_sql()).items():
        if key in minutes:
            _add(minutes[key], partial)
        else:
            minutes[key] = partial

    touched_spans = [(gpu_id, lo, hi) for gpu_id, spans in touched.items() for lo, hi in spans]
    empty = [pk for pk, gpu_id, bucket in _stored_minutes(touched_spans) if (gpu_id, bucket) not in minutes]

    # An hour: the minutes just computed, and the stored rows of its other minutes.
    others = []
    for gpu_id, spans in touched.items():
        hours = _merged([(_hour(lo), _hour(hi - _TICK) + _HOUR) for lo, hi in spans])
        others += [(gpu_id, lo, hi) for lo, hi in _minus(hours, spans)]
    hours = _minute_partials(others)
    for (gpu_id, minute), partial in minutes.items():
        key = (gpu_id, _hour(minute))
        if key in hours:
            _add(hours[key], partial)
        else:
            hours[key] = list(partial)

    adapt = connection.ops.adapt_datetimefield_value
    minute_rows = [(gpu_id, adapt(bucket), *_row(p, counts=True)) for (gpu_id, bucket), p in minutes.items()]
    # No hour row is deleted: one whose minutes are past their retention keeps its figures.
    hour_rows = [(gpu_id, adapt(bucket), *_row(p, counts=False)) for (gpu_id, bucket), p in hours.items()]
    return minute_rows, hour_rows, empty


def _upsert_sql(model, fields: list[str]) -> str:
    columns = ["gpu_id", "bucket", *fields]
    updates = ", ".join(f"{name} = excluded.{name}" for name in fields)
    return (
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT (gpu_id, bucket) DO UPDATE SET {updates}"
    )


def _write(minutes: list, hours: list, empty: list[int]) -> None:
    if empty:
        Rollup1m.objects.filter(pk__in=empty).delete()
    with connection.cursor() as cursor:
        # Minutes first: a later pass builds hours from them. (One statement of many rows was
        # slower on PostgreSQL than executemany, which psycopg pipelines.)
        for model, fields, rows in ((Rollup1m, _MINUTE_FIELDS, minutes), (Rollup1h, _HOUR_FIELDS, hours)):
            if rows:
                cursor.executemany(_upsert_sql(model, fields), rows)


def _touched(block) -> tuple[dict[int, list[Span]], dict[int, list[Span]]]:
    """GPU id → the minutes the block's batches touched (a host's batch covers its GPUs), and the
    parts of them no batch of the block covers (the block holds every reading of the rest)."""
    covered = defaultdict(list)
    for batch in block.batches:
        if batch.first_ts is not None:
            covered[batch.host_id].append((batch.first_ts, batch.last_ts + _TICK))  # last_ts is in
    touched, gaps = {}, {}
    for host_id, spans in covered.items():
        spans = _merged(spans)
        minutes = _merged([(_minute(lo), _minute(hi - _TICK) + _MINUTE) for lo, hi in spans])
        touched[host_id], gaps[host_id] = minutes, _minus(minutes, spans)
    by_gpu = {gpu_id: host_id for gpu_id, host_id in block.gpu_hosts.items() if host_id in touched}
    return {g: touched[h] for g, h in by_gpu.items()}, {g: gaps[h] for g, h in by_gpu.items() if gaps[h]}


def rollups_prepare(block) -> Prepared:
    """The rollups stage (telemetry.pipeline): the minutes and hours a block's batches touched,
    computed from the block's readings (and the raw readings its batches leave out of a touched
    minute), reads only; written by the pass. What it read stays current: rollup rows change by
    this stage's passes (one at a time) and retention's (far older buckets), and a reading stored
    meanwhile comes with a batch that waits for a pass of its own."""
    touched, gaps = _touched(block)
    computed = _compute(touched, gaps, block.readings)
    return Prepared(apply=lambda: _write(*computed))
