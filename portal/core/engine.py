"""What differs between the two databases the portal runs on, SQLite and PostgreSQL: the one
module that asks which engine a connection is (`.ci/engine_differences.py`, run by `make lint`,
refuses `connection.vendor` anywhere else). Each difference is one function, named by what
differs; the code that depends on it asks that function, never the engine's name.

SQLite is the small lab's database (one file, one writer at a time, datetimes stored as text);
PostgreSQL the fleet's (a server, partitioned and compressed history, advisory locks, COPY,
arrays as parameters). Functions take the connection (a DatabaseWrapper) when their caller has
one of its own (a field's `db_type`, a signal's `using`); otherwise they ask of the default one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection as default_connection
from django.db import transaction


def _postgresql(db=None) -> bool:
    return (default_connection if db is None else db).vendor == "postgresql"


def _sqlite(db=None) -> bool:
    return (default_connection if db is None else db).vendor == "sqlite"


def name(db=None) -> str:
    """The engine's name as Django spells it ("sqlite", "postgresql"): for labels and cache keys
    (a benchmark's figures, a per-backend plan), never to branch on: ask the function below that
    names the difference, or add one."""
    return (default_connection if db is None else db).vendor


# Concurrency --------------------------------------------------------------------------------------


def single_writer(db=None) -> bool:
    """Whether the database takes one writer at a time (SQLite: a writer locks the whole file), so
    that more worker processes only wait for each other, and a writer in a loop must leave the
    others a moment between its transactions."""
    return _sqlite(db)


def advisory_locks(db=None) -> bool:
    """Whether the database keeps session-level advisory locks (PostgreSQL's
    pg_try_advisory_lock), shared by every process of the cluster and released when the
    connection goes. Without them (SQLite, one machine) a cluster-wide lock is a file lock."""
    return _postgresql(db)


def server_processes(db=None) -> bool:
    """Whether the database's work runs in server processes of its own (PostgreSQL's backends),
    outside the portal's: a benchmark adds their CPU time. SQLite runs inside the portal."""
    return _postgresql(db)


def server_prepared_statements(db=None) -> bool:
    """Whether a statement can be prepared on the server, once per connection, through the
    driver's own cursor (psycopg on PostgreSQL). SQLite's module keeps its own statement cache."""
    return _postgresql(db)


# Storage ------------------------------------------------------------------------------------------


def partitioned_tables(db=None) -> bool:
    """Whether the database partitions a table by range (PostgreSQL's declarative partitioning):
    the readings' day partitions, dropped whole by retention. SQLite keeps one table."""
    return _postgresql(db)


def compressed_history(db=None) -> bool:
    """Whether old readings and rollups are kept compressed, a row per GPU and period (the chunk
    tables that telemetry's migrations create on PostgreSQL only, stored out of line). SQLite, a
    small lab's history, keeps raw rows only."""
    return _postgresql(db)


def single_precision_type(db) -> str | None:
    """The column type of a 4-byte float ("real" on PostgreSQL); None: the field's own type
    (SQLite has one 8-byte REAL)."""
    return "real" if _postgresql(db) else None


def small_counter_type(db) -> str | None:
    """The column type of a 64-bit counter that is almost always small: PostgreSQL's numeric(19),
    3 bytes for 0 and unaligned, where a bigint takes 8 and aligns the row to 8 (read back as a
    Decimal: cast it to bigint in the query). None: the field's own type (SQLite stores an integer
    in as few bytes as it needs)."""
    return "numeric(19)" if _postgresql(db) else None


def row_address() -> str:
    """The hidden column that addresses a row of a table without a key: SQLite's rowid,
    PostgreSQL's ctid."""
    return "rowid" if _sqlite() else "ctid"


def online_index_rebuild() -> bool:
    """Whether an index can be measured (pg_indexes_size) and rebuilt while writers go on
    (REINDEX CONCURRENTLY): PostgreSQL. SQLite has neither: its indexes are left as they are."""
    return _postgresql()


# SQL ----------------------------------------------------------------------------------------------


def epoch_seconds_sql(column: str) -> str | None:
    """SQL for a timestamp column as seconds since the epoch (a float), worked out by the database
    (PostgreSQL: cheaper than parsing thousands of timestamps in Python). None: SQLite stores
    datetimes as text; take the datetime and ask it for .timestamp()."""
    return f"EXTRACT(EPOCH FROM {column})::float8" if _postgresql() else None


def truncate_sql(column: str, unit: str) -> str:
    """SQL for the start of the "minute" or "hour" a timestamp column falls in, as the column
    stores it. SQLite keeps datetimes as UTC text ('YYYY-MM-DD HH:MM:SS[.ffffff]'): cut the text,
    in C, rather than call Django's Python function for every row."""
    if _postgresql():
        return f"date_trunc('{unit}', {column})"
    return f"(substr({column}, 1, 16) || ':00')" if unit == "minute" else f"(substr({column}, 1, 13) || ':00:00')"


def double_sql(expression: str) -> str:
    """SQL for a float expression as a double, so that its sum is one: PostgreSQL sums a real
    column as a real; SQLite's REAL is already a double."""
    return f"CAST({expression} AS double precision)" if _postgresql() else expression


def array_parameters() -> bool:
    """Whether a statement takes a list as one array parameter (PostgreSQL: unnest(%s::bigint[]),
    = ANY(%s)), its text the same for any number of rows; SQLite takes a placeholder per value."""
    return _postgresql()


def lateral_joins() -> bool:
    """Whether a join can run a subquery per row of its left side (PostgreSQL's LATERAL): a
    lookup per span, where the planner would rather merge-join a whole table. SQLite has none: a
    plain join."""
    return _postgresql()


def writable_ctes() -> bool:
    """Whether one statement can write several tables (PostgreSQL's INSERT ... RETURNING inside
    WITH): ingest writes a batch, its readings, XID events and latest state in one round trip."""
    return _postgresql()


def copies_rows() -> bool:
    """Whether rows are loaded through COPY (PostgreSQL, psycopg's copy; ingest's
    pg_write_method may choose a bulk INSERT instead). SQLite loads them with one prepared INSERT
    run by sqlite3's executemany, in C, the datetimes adapted to its UTC text."""
    return _postgresql()


@contextlib.contextmanager
def without_jit() -> Iterator[None]:
    """The statements inside run without JIT compilation (PostgreSQL: its planner, not knowing
    how short a list of spans is, prices a query over a few thousand of them high enough to compile
    its aggregates, seconds for a query that runs in milliseconds). SQLite compiles nothing: no
    transaction either, which would wait for the write lock."""
    if not _postgresql():
        yield
        return
    with transaction.atomic(savepoint=False), default_connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        yield
