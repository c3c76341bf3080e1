"""Database helpers for the few hot statements the portal runs per request or per batch."""

import functools
from contextlib import contextmanager

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.utils import CursorDebugWrapper
from django.db.models import BigIntegerField, Func

from portal.core import engine


@functools.cache
def _cursor_classes() -> tuple[type, type]:
    """psycopg's cursor, and one that prepares: made on first use, so that a portal on SQLite never
    loads psycopg (its C library is a tenth of a process's start)."""
    import psycopg

    class PreparedCursor(psycopg.Cursor):
        """Server-side binding, each statement prepared once per connection. Django's own cursors
        bind on the client and never prepare, so PostgreSQL parses and plans a statement every
        time. Behind a pooler in transaction mode (PgBouncer before 1.21) turn them off with
        DATABASE_PREPARED_STATEMENTS=false."""

        def execute(self, query, params=None, *, prepare=True, binary=None):
            return super().execute(query, params, prepare=prepare, binary=binary)

    return psycopg.Cursor, PreparedCursor


class _LoggedCursor(CursorDebugWrapper):
    """Logs the statement as written: Django would ask psycopg for the last query's text, which
    a prepared execution doesn't carry."""

    @contextmanager
    def debug_sql(self, sql=None, params=None, use_last_executed_query=False, many=False):
        with super().debug_sql(sql, params, use_last_executed_query=False, many=many):
            yield


def hot_cursor():
    """A cursor for a statement run on every request or batch: prepared on PostgreSQL (unless
    DATABASE_PREPARED_STATEMENTS is off), Django's usual cursor elsewhere. Wrapped like Django's
    own, so query logging and execute wrappers (django_assert_num_queries,
    CaptureQueriesContext) still see it. Use %s / %(name)s placeholders."""
    db = connections[DEFAULT_DB_ALIAS]  # the proxy `connection` looks the thread's up on every use
    if not engine.server_prepared_statements(db):
        return db.cursor()
    # As Django's own cursors do first: a kept connection that PostgreSQL dropped (a restart) is
    # replaced here, instead of failing this request (CONN_HEALTH_CHECKS, portal/settings.py).
    db.close_if_health_check_failed()
    db.ensure_connection()
    # Preparing costs a round trip of its own: worth it only on a connection that is kept
    # (DATABASE_CONN_MAX_AGE), not on one opened for a single request.
    keeps_connection = db.settings_dict.get("CONN_MAX_AGE") != 0
    prepare = settings.DATABASE_PREPARED_STATEMENTS and keeps_connection
    plain, prepared = _cursor_classes()
    cursor_class = prepared if prepare else plain
    raw = cursor_class(db.connection)
    return _LoggedCursor(raw, db) if db.queries_logged else db.make_cursor(raw)


def _converters(model) -> list[tuple[int, list, object]]:
    # What the ORM's compiler would apply to each column, worked out once per model and backend.
    key = (model, engine.name())
    if key not in _CONVERTERS:
        plan = []
        for position, field in enumerate(model._meta.concrete_fields):
            column = field.get_col(model._meta.db_table)
            found = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
            if found:
                plan.append((position, found, column))
        _CONVERTERS[key] = plan
    return _CONVERTERS[key]


_CONVERTERS: dict = {}


def row_to_models(row, *models) -> list:
    """Instances of each model from one row holding all of their concrete fields in order (as
    select_columns lists them), converted as the ORM would convert them."""
    instances, start = [], 0
    for model in models:
        width = len(model._meta.concrete_fields)
        values = list(row[start : start + width])
        for position, converters, column in _converters(model):
            for converter in converters:
                values[position] = converter(values[position], column, connection)
        instances.append(model.from_db(connection.alias, None, values))
        start += width
    return instances


def select_columns(model, alias: str) -> str:
    return ", ".join(f"{alias}.{connection.ops.quote_name(field.column)}" for field in model._meta.concrete_fields)


class EpochMs(Func):
    """A moment as whole milliseconds since 1970 (UTC), worked out by the database: a page that
    ships thousands of timestamps to a script gets integers, instead of each value parsed into a
    Python datetime and turned back (at 5,000 GPUs that parsing was most of the heatmap state's
    time, on SQLite and on PostgreSQL through psycopg's Python loaders). Rounded to the nearest
    millisecond, as `round(moment.timestamp() * 1000)`."""

    output_field = BigIntegerField()
    arity = 1
    template = "ROUND(EXTRACT(EPOCH FROM %(expressions)s) * 1000)::bigint"

    def as_sqlite(self, compiler, connection, **extra_context):
        # julianday() keeps milliseconds (SQLite's own precision); the double's error is ~0.05 ms.
        template = "CAST(ROUND((julianday(%(expressions)s) - 2440587.5) * 86400000) AS INTEGER)"
        return self.as_sql(compiler, connection, template=template, **extra_context)
