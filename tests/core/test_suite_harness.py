"""The suite's own plumbing for running in parallel and on two engines (tests/conftest.py): each
xdist worker flushes a Redis database of its own, and the PostgreSQL pass keeps every test that
reaches the database."""

import pytest

from tests.conftest import redis_test_url, uses_database


def test_each_xdist_worker_has_its_own_redis_database():
    base = "redis://127.0.0.1:6379/15"
    assert redis_test_url(base, None) == base
    assert redis_test_url(base, "master") == base
    assert redis_test_url(base, "gw0") == base
    assert redis_test_url(base, "gw1") == "redis://127.0.0.1:6379/14"
    assert redis_test_url("redis://:pw@redis.lab:6380/9", "gw3") == "redis://:pw@redis.lab:6380/6"


def test_a_worker_past_database_0_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="REDIS_TEST_URL=redis://127.0.0.1:6379/1: xdist worker gw2"):
        redis_test_url("redis://127.0.0.1:6379/1", "gw2")


class Item:
    """What uses_database reads of a collected test: its fixtures and its markers."""

    def __init__(self, fixturenames=(), markers=()):
        self.fixturenames, self.markers = list(fixturenames), set(markers)

    def get_closest_marker(self, name):
        return name if name in self.markers else None


@pytest.mark.parametrize(
    "item",
    [
        Item(fixturenames=["db"]),
        Item(fixturenames=["request", "transactional_db"]),
        Item(fixturenames=["live_server"]),
        Item(fixturenames=["require_postgres", "tmp_path"]),
        Item(markers=["django_db"]),
        Item(markers=["postgres"]),
    ],
    ids=["db", "transactional_db", "live_server", "require_postgres", "django_db mark", "postgres mark"],
)
def test_the_postgresql_pass_keeps_every_test_that_reaches_the_database(item):
    assert uses_database(item)


def test_the_postgresql_pass_leaves_out_the_tests_that_cannot():
    assert not uses_database(Item(fixturenames=["tmp_path", "settings", "monkeypatch"], markers=["browser"]))


def test_a_collected_test_asking_for_no_database_is_left_out(request):
    assert not uses_database(request.node)


def test_a_collected_test_asking_for_the_database_is_kept(db, request):
    assert uses_database(request.node)
