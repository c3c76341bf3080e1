"""The jobs tests post batches the way the agent does: a fresh rate limiter per test, and the
ingest view's database work on the request's thread (the test's transaction sees it)."""

import pytest

from portal.telemetry import ingest_view


@pytest.fixture(autouse=True)
def _ingest_on_the_tests_thread(monkeypatch):
    ingest_view._limiter = None
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    yield
    ingest_view._limiter = None
