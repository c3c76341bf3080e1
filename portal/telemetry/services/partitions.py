"""The readings table's daily partitions on PostgreSQL: created ahead, dropped whole by retention.

telemetry_reading is partitioned by RANGE (ts), one partition per UTC day, named
telemetry_reading_pYYYYMMDD, with no default partition (a default partition would have to be
scanned whenever a new day is attached, and rows landing in it could not be dropped by day).
Ingest refuses readings more than INGEST_MAX_AGE_HOURS old or more than 5 minutes ahead, so an
insert never misses a partition as long as the days from that far back to a few days ahead
exist: `reading_partitions_ensure` creates them, at migrate time (migration 0004 and every
`migrate` after) and hourly from beat (telemetry_prune_task); with beat stopped for longer,
ingest creates them when a write finds none (`missing_partition`). SQLite has no partitions: every
function here does nothing there.
"""

import datetime as dt
import logging

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from portal.core import engine

log = logging.getLogger(__name__)

TABLE = "telemetry_reading"
DAYS_AHEAD = 3
_PREFIX = f"{TABLE}_p"


def partitioned() -> bool:
    """Whether this database keeps readings in partitions (PostgreSQL, after migration 0004)."""
    if not engine.partitioned_tables():
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TABLE])
        row = cursor.fetchone()
    return row is not None and row[0] == "p"


def partition_name(day: dt.date) -> str:
    return f"{_PREFIX}{day:%Y%m%d}"


def _day_start(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def reading_partitions(cursor=None) -> dict[str, tuple[dt.datetime, dt.datetime]]:
    """The day partitions that exist: name -> [start, end). Others (an admin's own) are left out."""
    sql = """
        SELECT child.relname FROM pg_inherits
        JOIN pg_class child ON child.oid = pg_inherits.inhrelid
        WHERE pg_inherits.inhparent = to_regclass(%s)
    """
    if cursor is None:
        with connection.cursor() as own:
            own.execute(sql, [TABLE])
            names = [row[0] for row in own.fetchall()]
    else:
        cursor.execute(sql, [TABLE])
        names = [row[0] for row in cursor.fetchall()]
    found = {}
    for name in names:
        try:
            day = dt.datetime.strptime(name.removeprefix(_PREFIX), "%Y%m%d").date()
        except ValueError:
            continue
        if name.startswith(_PREFIX):
            found[name] = (_day_start(day), _day_start(day + dt.timedelta(days=1)))
    return found


def days_needed(now: dt.datetime) -> list[dt.date]:
    """The UTC days ingest may write to: from INGEST_MAX_AGE_HOURS back to DAYS_AHEAD ahead."""
    first = (now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS)).astimezone(dt.UTC).date()
    last = (now + dt.timedelta(days=DAYS_AHEAD)).astimezone(dt.UTC).date()
    return [first + dt.timedelta(days=n) for n in range((last - first).days + 1)]


def create_partition_sql(day: dt.date) -> str:
    start, end = _day_start(day), _day_start(day + dt.timedelta(days=1))
    return (
        f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF {TABLE} "
        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )


# A default partition for readings outside every day partition: the test database's only (tests
# store readings at fixed dates; see tests/conftest.py). The portal's own layout has none.
with_default_partition = False


def reading_partitions_ensure(
    *, now: dt.datetime | None = None, days: list[dt.date] | None = None, cursor=None
) -> list[str]:
    """Create the missing day partitions (by default the days ingest may write to); returns the
    names created. Cheap when they exist (one catalogue query)."""
    if not partitioned():
        return []
    days = days if days is not None else days_needed(now or timezone.now())
    created = []
    if cursor is None:
        with connection.cursor() as own:
            return reading_partitions_ensure(now=now, days=days, cursor=own)
    existing = reading_partitions(cursor)
    if with_default_partition:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE}_default PARTITION OF {TABLE} DEFAULT")
    for day in sorted(set(days)):
        if partition_name(day) not in existing:
            cursor.execute(create_partition_sql(day))
            created.append(partition_name(day))
    return created


def missing_partition(error: Exception) -> bool:
    """Whether a write failed for want of a day partition: PostgreSQL's "no partition of relation
    ... found for row", told by its code and table rather than its (translated) text. Happens when
    beat stopped for longer than DAYS_AHEAD; ingest then creates the days and writes again."""
    cause = error.__cause__ if error.__cause__ is not None else error
    diag = getattr(cause, "diag", None)
    return (
        getattr(cause, "sqlstate", None) == "23514"  # check_violation, as a CHECK constraint's
        and diag is not None
        and diag.table_name == TABLE
        and diag.constraint_name is None  # a CHECK constraint names itself; partition routing doesn't
    )


def _rows(cursor, name: str) -> int:
    """A partition's rows: the planner's count when it has one (counting a day would read it)."""
    cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)", [name])
    estimate = cursor.fetchone()[0]
    if estimate >= 0:
        return estimate
    cursor.execute(f"SELECT count(*) FROM {name}")
    return cursor.fetchone()[0]


def reading_partitions_drop(*, before: dt.datetime) -> dict[str, int]:
    """Drop every day partition wholly before `before` (its end <= before): constant time per
    day, no dead rows left for vacuum. Returns the names dropped (oldest first) with their rows."""
    if not partitioned():
        return {}
    dropped = {}
    with connection.cursor() as cursor:
        if connection.in_atomic_block:
            # Inside a caller's transaction (tests): DROP refuses a table with foreign key checks
            # still deferred, so they run now rather than at commit.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for name, (_, end) in sorted(reading_partitions(cursor).items(), key=lambda item: item[1]):
            if end <= before:
                dropped[name] = _rows(cursor, name)
                cursor.execute(f"DROP TABLE {name}")
    return dropped


def other_partitions() -> list[str]:
    """Partitions that are not a day's (none in the portal's layout; the test database adds a
    default partition for readings outside today's window)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT child.relname FROM pg_inherits JOIN pg_class child ON child.oid = pg_inherits.inhrelid "
            "WHERE pg_inherits.inhparent = to_regclass(%s)",
            [TABLE],
        )
        names = [row[0] for row in cursor.fetchall()]
        days = reading_partitions(cursor)
    return sorted(name for name in names if name not in days)


COMPACTED = "compacted"


def invalid_indexes(cursor, partition: str | None = None) -> list[str]:
    """Invalid indexes on the day partitions (of one, or of all): what an interrupted REINDEX
    CONCURRENTLY leaves (<index>_ccnew, or _ccold after the swap). Never used by a query, but
    written by every insert and taking the space of a whole index. Those attached to an index of
    the parent table are left out (dropped with it, not alone)."""
    cursor.execute(
        """
        SELECT idx.relname, child.relname FROM pg_inherits
        JOIN pg_class child ON child.oid = pg_inherits.inhrelid
        JOIN pg_index ON pg_index.indrelid = child.oid
        JOIN pg_class idx ON idx.oid = pg_index.indexrelid
        WHERE pg_inherits.inhparent = to_regclass(%s) AND NOT pg_index.indisvalid
          AND NOT EXISTS (SELECT FROM pg_inherits attached WHERE attached.inhrelid = pg_index.indexrelid)
        ORDER BY idx.relname
        """,
        [TABLE],
    )
    found = cursor.fetchall()
    days = reading_partitions(cursor)
    return [index for index, table in found if table in days and partition in (None, table)]


def _drop_invalid_indexes(cursor, partition: str | None = None) -> list[str]:
    concurrently = "" if connection.in_atomic_block else " CONCURRENTLY"
    dropped = invalid_indexes(cursor, partition)
    for index in dropped:
        cursor.execute(f'DROP INDEX{concurrently} IF EXISTS "{index}"')
    return dropped


def reading_partitions_compact(*, now: dt.datetime | None = None) -> list[str]:
    """Rebuild the (gpu, ts) key index of each day partition once its day is over.

    While a day is written, every GPU appends to its own range of the key, and each full leaf page
    splits in two halves of which the first is never written again: the index ends about half
    empty. Rebuilt, its pages are 90 % full (14 bytes a reading less). CONCURRENTLY outside a
    transaction (ingest keeps writing late readings); a partition is marked by a comment once
    done. An interrupted rebuild (a worker killed, a statement cancelled) leaves an invalid copy of
    the index: those are dropped first, and after a rebuild that fails. Returns the partitions
    rebuilt."""
    if not partitioned():
        return []
    now = now or timezone.now()
    done = []
    with connection.cursor() as cursor:
        for index in _drop_invalid_indexes(cursor):
            log.warning("dropped invalid index %s (an interrupted rebuild)", index)
        for name, (_, end) in sorted(reading_partitions(cursor).items(), key=lambda item: item[1]):
            if end > now - dt.timedelta(hours=1):
                continue
            cursor.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", [name])
            if cursor.fetchone()[0] == COMPACTED:
                continue
            concurrently = "" if connection.in_atomic_block else " CONCURRENTLY"
            try:
                cursor.execute(f"REINDEX INDEX{concurrently} {name}_pkey")
            except DatabaseError:
                if concurrently:  # inside a transaction the failure aborted it; nothing was left
                    _drop_invalid_indexes(cursor, name)
                raise
            cursor.execute(f"COMMENT ON TABLE {name} IS '{COMPACTED}'")
            done.append(name)
    return done


def table_indexes_rebuild(cursor, table: str) -> None:
    """Rebuild a (plain) table's indexes, CONCURRENTLY outside a transaction (writers go on);
    the invalid copies an interrupted rebuild left (written by every insert, never read) are
    dropped first."""
    concurrently = "" if connection.in_atomic_block else " CONCURRENTLY"
    cursor.execute(
        "SELECT idx.relname FROM pg_index JOIN pg_class idx ON idx.oid = pg_index.indexrelid "
        "WHERE pg_index.indrelid = to_regclass(%s) AND NOT pg_index.indisvalid",
        [table],
    )
    for (index,) in cursor.fetchall():
        cursor.execute(f'DROP INDEX{concurrently} IF EXISTS "{index}"')
    cursor.execute(f"REINDEX TABLE{concurrently} {table}")
