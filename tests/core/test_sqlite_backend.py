"""The embedded default's SQLite backend: SQLITE_SLOW_LOCK_MS names the code behind a long hold
of the write lock (how what delays ingest is found)."""

import logging
import time

import pytest
from django.db import connection, transaction

from tests.factories import HostFactory


def _messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "portal.sqlite"]


@pytest.mark.django_db(transaction=True)
def test_a_transaction_holding_the_write_lock_long_is_logged_with_its_code(caplog, monkeypatch):
    if connection.vendor != "sqlite":
        pytest.skip("the write lock is SQLite's")
    # Far apart (0.5 s against a write of a few ms), so that a quick write on a machine loaded by
    # the other tests still counts as quick.
    monkeypatch.setattr(connection, "slow_lock_s", 0.5)

    def quick_write():
        with transaction.atomic():
            HostFactory()

    def slow_write():
        with transaction.atomic():
            HostFactory()
            time.sleep(0.6)

    with caplog.at_level(logging.WARNING, logger="portal.sqlite"):
        quick_write()
        assert _messages(caplog) == []
        slow_write()
    (message,) = _messages(caplog)
    assert "SQLite write lock: waited 0 ms, held" in message
    held_ms = int(message.split("held ")[1].split(" ms")[0])
    assert 600 <= held_ms < 10_000, message
    assert message.split(": ", 2)[-1].startswith("slow_write (tests/core/test_sqlite_backend.py:"), message


@pytest.mark.django_db(transaction=True)
def test_nothing_is_logged_unless_asked(caplog):
    if connection.vendor != "sqlite":
        pytest.skip("the write lock is SQLite's")
    assert connection.slow_lock_s == 0  # SQLITE_SLOW_LOCK_MS unset
    with caplog.at_level(logging.WARNING, logger="portal.sqlite"), transaction.atomic():
        HostFactory()
        time.sleep(0.05)
    assert _messages(caplog) == []
