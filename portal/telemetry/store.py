"""The one door to stored readings: every module outside telemetry's writers reads readings here.

A GPU's readings are stored in one of two forms: raw rows (`Reading`, partitioned by day on
PostgreSQL) and, once older than READINGS_COMPRESS_AFTER_HOURS, compressed hours
(`ReadingChunk`, services/compression.py, PostgreSQL only). A late reading may land raw in an
hour that is already compressed, even at an instant the chunk holds (a late duplicate): until
the next compression merges it, both forms hold a reading there. Readers ask this module for

- rows: `readings_of` (a period), `readings_after` (past each GPU's own mark),
  `readings_in_spans` (several GPUs' periods at once);
- counts: `reading_count` (one GPU's period), `hour_counts` (per GPU and hour);
- aggregates: `readings_aggregate` (Count, Max, Min, Sum and Avg per GPU, optionally per bin of
  a column), computed by the database over raw rows and in Python over compressed hours;

and never learn which form answered: a second reading of a GPU at one instant counts once,
whatever its form, as the write paths drop it. Nothing a chart, a report, a check or the wear
meters read changes its answer because the readings grew old enough to be compressed
(tests/telemetry/test_store.py runs each reader before and after compression).

`.ci/readings_door.py` (run by `make lint`) keeps every other module of the portal off the
readings models and the compression module; the writers (ingest, compression, retention,
partitions) are the only exceptions. Rollups come through here too: `rollups_of` gives 1-minute
and 1-hour rollups, raw rows and compressed periods (services/rollup_chunks.py) alike.
"""

from __future__ import annotations

import datetime as dt
import math
import operator
from collections.abc import Callable, Iterable

from django.conf import settings
from django.db import connection
from django.db.models import Avg, BigIntegerField, Count, F, FloatField, Max, Min, Q, Sum
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Floor, TruncHour
from django.utils import timezone

from portal.core import engine
from portal.core.errors import InvalidInput
from portal.telemetry.columns import READING_ROW_COLUMNS, tuple_picker
from portal.telemetry.models import CounterField, JobSet, Reading, Rollup1h, Rollup1m
from portal.telemetry.services import compression, partitions, rollup_chunks

# The raw readings' table, for the few readers that aggregate in SQL of their own (rollups over
# spans that hold no compressed hour); everyone else reads rows, counts or aggregates above.
RAW_TABLE = partitions.TABLE
HOUR = dt.timedelta(hours=1)
_TICK = dt.timedelta(microseconds=1)


def _floor_hour(moment: dt.datetime) -> dt.datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


_COUNTERS = frozenset(field.name for field in Reading._meta.concrete_fields if isinstance(field, CounterField))


class _BigintCast(Cast):
    """A counter cast to bigint by the server: the driver's ints need no conversion in Python."""

    def __init__(self, expression):
        super().__init__(expression, BigIntegerField())

    @property
    def convert_value(self):
        return self._convert_value_noop


def _values_list(queryset, columns: tuple[str, ...]):
    """queryset.values_list(*columns). Where the counters are stored in a small type of their own
    (engine.small_counter_type: numeric, read as Decimal and converted per value in Python) they
    come cast to bigint by the server: the rows then come as the driver builds them, with no
    conversion in Python (most of a block read's CPU otherwise)."""
    if engine.small_counter_type(connection) is None or _COUNTERS.isdisjoint(columns):
        return queryset.values_list(*columns)
    casts = {f"int_{name}": _BigintCast(name) for name in columns if name in _COUNTERS}
    return queryset.annotate(**casts).values_list(*(f"int_{name}" if name in _COUNTERS else name for name in columns))


# Rows ---------------------------------------------------------------------------------------------


def readings_of(
    *,
    gpu_ids: list[int],
    columns: tuple[str, ...],
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    start_open: bool = False,
    end_closed: bool = False,
    descending: bool = False,
    limit: int | None = None,
    epoch: bool = False,
    where: Q | None = None,
) -> list[tuple]:
    """The readings of these GPUs from start (included unless start_open) to end (excluded unless
    end_closed), raw or compressed alike, as tuples of `columns` (reading column names, e.g.
    "ts" and the registry's metric names), in (gpu_id, ts) order, or reversed with `descending`; at most `limit`.
    A raw reading at the instant of a compressed one (a late duplicate) is left out, as a second
    reading of a GPU at one instant always is. `epoch`: ts as seconds since the epoch (a float; on
    PostgreSQL the database computes it, cheaper than parsing thousands of timestamps in Python).
    `where`: only the readings that meet this condition (plain lookups on reading columns: exact,
    lt, lte, gt, gte, isnull, in; combined with & | ~)."""
    wanted = tuple(dict.fromkeys(("gpu_id", "ts", *columns)))
    raw = Reading.objects.filter(gpu_id__in=list(gpu_ids))
    if start is not None:
        raw = raw.filter(**{"ts__gt" if start_open else "ts__gte": start})
    if end is not None:
        raw = raw.filter(**{"ts__lte" if end_closed else "ts__lt": end})
    if where is not None:
        raw = raw.filter(where)
    order = ("-gpu_id", "-ts") if descending else ("gpu_id", "ts")
    raw = raw.order_by(*order)
    epoch_sql = engine.epoch_seconds_sql("ts") if epoch else None
    if epoch_sql:
        raw = raw.annotate(epoch_s=RawSQL(epoch_sql, ())).values_list(
            *("epoch_s" if name == "ts" else name for name in wanted)
        )
    else:
        raw = _values_list(raw, wanted)
    rows = list(raw if limit is None else raw[:limit])
    if epoch and not epoch_sql:
        rows = [(row[0], row[1].timestamp(), *row[2:]) for row in rows]
    packed = _compressed(gpu_ids, start, end, wanted, where, start_open=start_open, end_closed=end_closed,
                         descending=descending, limit=limit, epoch=epoch)  # fmt: skip
    if packed:
        rows = _merged(rows, packed, descending, limit)
    if wanted == columns:
        return rows
    return list(map(tuple_picker([wanted.index(name) for name in columns]), rows))


def _compressed(gpu_ids, start, end, wanted, where, *, limit=None, **bounds) -> list[tuple]:
    """The compressed readings as readings_of asks for them (`where` applied here, in Python)."""
    if where is None:
        return compression.chunk_readings(list(gpu_ids), start, end, wanted, limit=limit, **bounds)
    needed = tuple(dict.fromkeys((*wanted, *_columns_of(where))))
    test = _predicate(where, needed)
    rows = [row for row in compression.chunk_readings(list(gpu_ids), start, end, needed, **bounds) if test(row)]
    rows = rows if limit is None else rows[:limit]
    if needed == wanted:
        return rows
    return list(map(tuple_picker([needed.index(name) for name in wanted]), rows))


def _merged(raw: list[tuple], packed: list[tuple], descending: bool, limit: int | None) -> list[tuple]:
    """Raw and compressed rows (gpu_id, ts, ...) in one order, a raw row at a compressed row's
    instant left out."""
    stored = {(row[0], row[1]) for row in packed}
    rows = sorted(packed + [row for row in raw if (row[0], row[1]) not in stored], key=lambda row: row[:2],
                  reverse=descending)  # fmt: skip
    return rows if limit is None else rows[:limit]


def readings_after(
    *, after: dict[int, dt.datetime | None], columns: tuple[str, ...], limit: int, epoch: bool = False
) -> list[tuple]:
    """The readings of each GPU of `after` newer than its own mark ({gpu_id: ts, or None: all of
    them}), raw or compressed alike, as tuples (gpu_id, *columns) in (gpu_id, ts) order, at most
    `limit`. One query for the raw readings; when a mark is old enough for compressed readings
    to follow it (or None), one to learn whether any do, and then one per distinct mark (a GPU
    whose readings were compressed before they were counted, e.g. meters started on a lab with
    history). Fresh marks, the usual case, cost no more than the raw query."""
    groups: dict[dt.datetime | None, list[int]] = {}
    for gpu_id, mark in after.items():
        groups.setdefault(mark, []).append(gpu_id)
    condition = Q()
    for mark, ids in groups.items():
        condition |= Q(gpu_id__in=ids) if mark is None else Q(gpu_id__in=ids, ts__gt=mark)
    wanted = tuple(dict.fromkeys(("gpu_id", "ts", *columns)))
    queryset = Reading.objects.filter(condition).order_by("gpu_id", "ts")
    epoch_sql = engine.epoch_seconds_sql("ts") if epoch else None
    if epoch_sql:
        rows = [
            tuple(row)
            for row in queryset.annotate(epoch_s=RawSQL(epoch_sql, ())).values_list(
                *("epoch_s" if name == "ts" else name for name in wanted)
            )[:limit]
        ]
    else:
        rows = [tuple(row) for row in _values_list(queryset, wanted)[:limit]]
        if epoch:
            rows = [(row[0], row[1].timestamp(), *row[2:]) for row in rows]
    oldest = None if None in groups else min(groups, default=None)
    if after and (oldest is None or _may_be_compressed(oldest)) and _any_chunk(list(after), oldest):
        packed = []
        for mark, ids in groups.items():
            packed += compression.chunk_readings(ids, mark, None, wanted, start_open=True, limit=limit, epoch=epoch)
        if packed:
            rows = _merged(rows, packed, False, limit)
    if wanted == ("gpu_id", *columns):
        return rows
    return list(map(tuple_picker([wanted.index(name) for name in ("gpu_id", *columns)]), rows))


def _any_chunk(gpu_ids: list[int], after: dt.datetime | None) -> bool:
    """Whether any of these GPUs has a compressed hour ending after `after` (None: at all)."""
    if not engine.compressed_history():
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {compression.TABLE} WHERE gpu_id = ANY(%s) AND (%s IS NULL OR start > %s))",
            [gpu_ids, after, None if after is None else after - HOUR],
        )
        return cursor.fetchone()[0]


def readings_in_spans(
    *, spans: Iterable[tuple[list[int], dt.datetime, dt.datetime]], columns: tuple[str, ...]
) -> list[tuple]:
    """The readings of several periods at once, each (gpu_ids, start, end) with both ends
    included, raw or compressed alike, as tuples of `columns` (in no particular order; a reading
    in two periods comes once). One query per 100 periods (SQLite limits an expression's depth),
    and, for periods old enough to be compressed, one to learn whether any holds a compressed hour."""
    spans = [(list(ids), start, end) for ids, start, end in spans if ids]
    rows = []
    for part in range(0, len(spans), 100):
        condition = Q()
        for ids, start, end in spans[part : part + 100]:
            condition |= Q(gpu_id__in=ids, ts__gte=start, ts__lte=end)
        rows += _values_list(Reading.objects.filter(condition), columns)
    hours = compression.chunk_hour_counts(
        [(gpu_id, _floor_hour(start), end + _TICK) for ids, start, end in spans for gpu_id in ids
         if _may_be_compressed(start)]
    )  # fmt: skip
    if hours:
        gpu_at, ts_at = columns.index("gpu_id"), columns.index("ts")
        by_key = {(row[gpu_at], row[ts_at]): row for row in rows}
        chunked = {gpu_id for gpu_id, _ in hours}
        for ids, start, end in spans:
            with_chunks = sorted(chunked & set(ids))
            if with_chunks:  # a compressed reading wins over a raw one at its instant (a late duplicate)
                for row in compression.chunk_readings(with_chunks, start, end, columns, end_closed=True):
                    by_key[row[gpu_at], row[ts_at]] = row
        rows = list(by_key.values())
    return rows


def _may_be_compressed(moment: dt.datetime) -> bool:
    """Whether readings at or after `moment` may be compressed: only readings older than
    READINGS_COMPRESS_AFTER_HOURS are (an hour's slack for a clock a little ahead), so a reader of
    fresh readings (the pipeline's pending batches) asks nothing of the compressed form."""
    horizon = timezone.now() - dt.timedelta(hours=settings.READINGS_COMPRESS_AFTER_HOURS) + HOUR
    return engine.compressed_history() and moment < horizon


# Counts -------------------------------------------------------------------------------------------


def gpus_with_compressed_hours(spans: list[tuple[int, dt.datetime, dt.datetime]]) -> set[int]:
    """The GPUs of these (gpu_id, start, end) spans with compressed hours in them: for a reader
    that aggregates raw readings in SQL itself (the rollups) and must read the others' through
    readings_of. One query, none when every span is too recent to be compressed."""
    old = [(gpu_id, _floor_hour(lo), hi) for gpu_id, lo, hi in spans if _may_be_compressed(lo)]
    return {gpu_id for gpu_id, _ in compression.chunk_hour_counts(old)}


def hour_counts(spans: list[tuple[int, dt.datetime, dt.datetime]]) -> dict[tuple[int, dt.datetime], int]:
    """The readings of each (gpu_id, start, end) span, start <= ts < end, counted per GPU and UTC
    hour, raw or compressed alike, a late duplicate once: {(gpu_id, hour): count}, no key for an
    hour without readings. Two queries (raw and compressed counts), and two more for each hour
    that both forms hold or that a span's edge cuts through a compressed hour."""
    if not spans:
        return {}
    condition = Q()
    for gpu_id, lo, hi in spans:
        condition |= Q(gpu_id=gpu_id, ts__gte=lo, ts__lt=hi)
    counts = {
        (row["gpu_id"], row["at"]): row["n"]
        for row in Reading.objects.filter(condition)
        .annotate(at=TruncHour("ts", tzinfo=dt.UTC))
        .values("gpu_id", "at")
        .annotate(n=Count("ts"))
        .order_by()
    }
    packed = compression.chunk_hour_counts([(gpu_id, _floor_hour(lo), hi) for gpu_id, lo, hi in spans])
    for (gpu_id, hour), count in packed.items():
        inside = [(lo, hi) for span_gpu, lo, hi in spans if span_gpu == gpu_id and lo < hour + HOUR and hi > hour]
        if (gpu_id, hour) not in counts and any(lo <= hour and hour + HOUR <= hi for lo, hi in inside):
            counts[gpu_id, hour] = count  # the whole hour, compressed only: the chunk's count
            continue
        found = set()
        for lo, hi in inside:  # both forms, or a span's edge inside the hour: the instants, once
            found.update(readings_of(gpu_ids=[gpu_id], columns=("ts",), start=max(lo, hour), end=min(hi, hour + HOUR)))
        if found:
            counts[gpu_id, hour] = len(found)
    return counts


def reading_count(*, gpu_id: int, start: dt.datetime, end: dt.datetime, at_most: int) -> int:
    """How many readings one GPU has in [start, end), raw or compressed alike; past `at_most`,
    some number above it (the raw readings are counted no further)."""
    raw = Reading.objects.filter(gpu_id=gpu_id, ts__gte=start, ts__lt=end).order_by()[: at_most + 1].count()
    if raw > at_most or compression.chunk_count(gpu_id, start, end) == 0:
        return raw
    return sum(hour_counts([(gpu_id, start, end)]).values())


# Aggregates ---------------------------------------------------------------------------------------

_AGGREGATES = {Count: "count", Max: "max", Min: "min", Sum: "sum", Avg: "avg"}


def readings_aggregate(
    *,
    gpu_ids: list[int],
    start: dt.datetime,
    end: dt.datetime,
    where: Q | None = None,
    bins: dict[str, tuple[str, float]] | None = None,
    **aggregates,
) -> list[dict]:
    """Aggregates of the readings of each GPU in [start, end) that meet `where`, per GPU and, with
    `bins` ({name: (column, width)}), per bin floor(column / width) as well: rows like a
    `values("gpu_id", *bins).annotate(**aggregates)` (Count, Max, Min, Sum, Avg of a reading
    column, each with an optional filter), no row for a group without readings. Raw or compressed
    alike, a late duplicate once: the database aggregates the raw readings outside the GPUs'
    compressed hours, Python the readings (raw and compressed, merged) inside them. Averages are
    a float sum over a count in both, so a figure does not depend on the form its readings are
    stored in."""
    specs = {name: _spec(name, aggregate) for name, aggregate in aggregates.items()}
    bins = bins or {}
    gpu_ids = list(gpu_ids)
    # The period of each GPU that holds compressed hours: read as rows, merged, in Python.
    inside: dict[int, tuple[dt.datetime, dt.datetime]] = {}
    for (gpu_id, hour), _ in compression.chunk_hour_counts([(g, _floor_hour(start), end) for g in gpu_ids]).items():
        lo, hi = inside.get(gpu_id, (hour, hour + HOUR))
        inside[gpu_id] = (min(lo, hour), max(hi, hour + HOUR))
    inside = {gpu_id: (max(lo, start), min(hi, end)) for gpu_id, (lo, hi) in inside.items()}

    queryset = Reading.objects.filter(gpu_id__in=gpu_ids, ts__gte=start, ts__lt=end)
    if where is not None:
        queryset = queryset.filter(where)
    for gpu_id, (lo, hi) in inside.items():
        queryset = queryset.exclude(gpu_id=gpu_id, ts__gte=lo, ts__lt=hi)
    if bins:
        floors = {name: Floor(F(column) / float(width)) for name, (column, width) in bins.items()}
        queryset = queryset.annotate(**floors)
    sql = {}
    for name, (kind, column, condition) in specs.items():
        if kind == "avg":
            sql[f"{name}__sum"] = Sum(Cast(column, FloatField()), filter=condition)
            sql[f"{name}__n"] = Count(column, filter=condition)
        else:
            sql[name] = {"count": Count, "max": Max, "min": Min, "sum": Sum}[kind](column, filter=condition)
    keys = ("gpu_id", *bins)
    groups: dict[tuple, dict] = {}
    for row in queryset.values(*keys).annotate(**sql).order_by():
        group = tuple(int(row[key]) if key in bins and row[key] is not None else row[key] for key in keys)
        groups[group] = {name: row[name] for name in sql}

    if inside:
        columns = tuple(dict.fromkeys(["gpu_id", "ts", *(c for c, _ in bins.values()), *_columns_of(where),
                                       *(c for _, c, q in specs.values()), *(n for _, _, q in specs.values()
                                                                              for n in _columns_of(q))]))  # fmt: skip
        test = _predicate(where, columns) if where is not None else None
        tests = {name: _predicate(q, columns) for name, (_, _, q) in specs.items() if q is not None}
        at = {name: columns.index(name) for name in columns}
        for gpu_id, (lo, hi) in inside.items():
            for row in readings_of(gpu_ids=[gpu_id], columns=columns, start=lo, end=hi):
                if test is not None and not test(row):
                    continue
                group = (gpu_id, *(_bin(row[at[column]], width) for column, width in bins.values()))
                figures = groups.setdefault(group, {name: _empty(name, sql) for name in sql})
                for name, (kind, column, _) in specs.items():
                    if name in tests and not tests[name](row):
                        continue
                    _add(figures, name, kind, row[at[column]])
    out = []
    for group, figures in groups.items():
        row = dict(zip(keys, group, strict=True))
        for name, (kind, _, _) in specs.items():
            if kind == "avg":
                n = figures[f"{name}__n"]
                row[name] = figures[f"{name}__sum"] / n if n else None
            else:
                row[name] = figures[name]
        out.append(row)
    return out


def _spec(name: str, aggregate) -> tuple[str, str, Q | None]:
    kind = _AGGREGATES.get(type(aggregate))
    sources = aggregate.source_expressions
    column = getattr(sources[0], "name", None) if len(sources) == 1 else None
    if kind is None or column not in READING_ROW_COLUMNS or getattr(aggregate, "distinct", False):
        raise InvalidInput(f"{name}: Count, Max, Min, Sum or Avg of one reading column",
                           problems=[(name, "Count, Max, Min, Sum or Avg of one reading column")])  # fmt: skip
    return kind, column, aggregate.filter


def _empty(name: str, sql: dict):
    return 0 if isinstance(sql[name], Count) else None


def _add(figures: dict, name: str, kind: str, value) -> None:
    if kind == "avg":
        if value is not None:
            figures[f"{name}__sum"] = (figures[f"{name}__sum"] or 0.0) + float(value)
            figures[f"{name}__n"] += 1
    elif kind == "count":
        figures[name] += value is not None
    elif value is not None:
        old = figures[name]
        figures[name] = value if old is None else {"max": max, "min": min, "sum": operator.add}[kind](old, value)


def _bin(value, width: float):
    return None if value is None else int(math.floor(value / float(width)))


# Conditions evaluated on rows (compressed readings are filtered in Python) ------------------------

_LOOKUPS: dict[str, Callable] = {
    "exact": lambda value, wanted: value is not None and value == wanted if wanted is not None else value is None,
    "lt": lambda value, wanted: value is not None and value < wanted,
    "lte": lambda value, wanted: value is not None and value <= wanted,
    "gt": lambda value, wanted: value is not None and value > wanted,
    "gte": lambda value, wanted: value is not None and value >= wanted,
    "isnull": lambda value, wanted: (value is None) == bool(wanted),
    "in": lambda value, wanted: value is not None and value in wanted,
}


def _split(lookup: str) -> tuple[str, str]:
    column, _, name = lookup.partition("__")
    name = name or "exact"
    if column not in READING_ROW_COLUMNS or name not in _LOOKUPS:
        raise InvalidInput(f"{lookup}: a reading column and one of {', '.join(_LOOKUPS)}",
                           problems=[(lookup, f"a reading column and one of {', '.join(_LOOKUPS)}")])  # fmt: skip
    return column, name


def _columns_of(condition: Q | None) -> list[str]:
    if condition is None:
        return []
    out = []
    for child in condition.children:
        out += _columns_of(child) if isinstance(child, Q) else [_split(child[0])[0]]
    return out


def _predicate(condition: Q, columns: tuple[str, ...]) -> Callable[[tuple], bool]:
    """A function telling whether a row (a tuple of `columns`) meets `condition`, as SQL would
    (a comparison with NULL is false)."""
    tests = []
    for child in condition.children:
        if isinstance(child, Q):
            tests.append(_predicate(child, columns))
        else:
            column, name = _split(child[0])
            position, check, wanted = columns.index(column), _LOOKUPS[name], child[1]
            tests.append(lambda row, position=position, check=check, wanted=wanted: check(row[position], wanted))
    combine = all if condition.connector == Q.AND else any

    def test(row: tuple) -> bool:
        met = combine(each(row) for each in tests)
        return not met if condition.negated else met

    return test


# --- rollups -------------------------------------------------------------------------------------

_ROLLUP_MODELS = {"1m": Rollup1m, "1h": Rollup1h}


def rollups_of(
    *,
    gpu_ids: list[int],
    resolution: str,
    columns: tuple[str, ...],
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
) -> list[tuple]:
    """The rollups ("1m" or "1h") of these GPUs with start <= bucket < end, raw rows and compressed
    days alike (services/rollup_chunks.py), as tuples of `columns` ("gpu_id", "bucket" and rollup
    fields, e.g. "temperature_c_mean"), in (gpu_id, bucket) order. A raw row of a bucket that is
    also compressed (written again after a late reading) is the one given: the next compression
    run merges it. Every reader of rollups reads them here."""
    model = _ROLLUP_MODELS[resolution]
    wanted = tuple(dict.fromkeys(("gpu_id", "bucket", *columns)))
    raw = model.objects.filter(gpu_id__in=list(gpu_ids))
    if start is not None:
        raw = raw.filter(bucket__gte=start)
    if end is not None:
        raw = raw.filter(bucket__lt=end)
    # Raw rows first: a compression run committing in between moves rows into a chunk, never out.
    rows = list(raw.order_by("gpu_id", "bucket").values_list(*wanted))
    packed = rollup_chunks.chunk_rollups(resolution, list(gpu_ids), start, end, wanted)
    if packed:
        stored = {(row[0], row[1]) for row in rows}
        rows = sorted(rows + [row for row in packed if (row[0], row[1]) not in stored], key=lambda row: row[:2])
    if wanted == columns:
        return rows
    return list(map(tuple_picker([wanted.index(name) for name in columns]), rows))


# Job sets --------------------------------------------------------------------------------------


def job_set_keys(ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    """The job keys each stored job set names (a reading's `job_set` column): {id: keys}, sorted;
    the empty set is (). One query."""
    wanted = {job_set for job_set in ids if job_set is not None}
    if not wanted:
        return {}
    return {
        pk: tuple(keys.split(" ")) if keys else ()
        for pk, keys in JobSet.objects.filter(pk__in=wanted).values_list("pk", "keys")
    }
