"""After a PostgreSQL restart, a kept connection (DATABASE_CONN_MAX_AGE) is replaced before the
next request uses it, on Django's cursors and on the ingest's hot cursor alike, instead of
failing that request (found by `make soak`: ingest answered 503 for as long as the thread
pool's old connections lasted)."""

import time

import pytest
from django.db import connection, connections

from portal.core.db import hot_cursor

pytestmark = pytest.mark.postgres


@pytest.fixture
def kept_connection():
    """A connection kept between requests, as DATABASE_CONN_MAX_AGE=600 keeps it."""
    before = connection.settings_dict["CONN_MAX_AGE"]
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = 600
    yield
    connection.settings_dict["CONN_MAX_AGE"] = before
    connection.close()


def _dropped_by_the_server() -> None:
    """What a restart does to the connection: the server ends its session."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            for _ in range(100):  # it only signals the backend: wait until it is gone
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
                if not cursor.fetchone()[0]:
                    break
                time.sleep(0.05)
    finally:
        other.close()
    connection.close_if_unusable_or_obsolete()  # the next request begins


@pytest.mark.django_db(transaction=True)
def test_the_hot_cursor_replaces_a_connection_the_server_dropped(require_postgres, kept_connection):
    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
    _dropped_by_the_server()
    with hot_cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_django_cursors_replace_it_too(require_postgres, kept_connection):
    _dropped_by_the_server()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
