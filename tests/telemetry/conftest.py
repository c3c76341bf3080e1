"""Fixtures for the ingest and telemetry tests: a host with a token, a client for the ingest
endpoint, and a count of every table a batch writes to (to prove "nothing stored")."""

from dataclasses import dataclass

import pytest
from django.test import Client

from portal.fleet.models import Gpu, Host, MaintenanceRecord
from portal.telemetry import ingest_view
from portal.telemetry.models import GpuLatest, IngestBatch, Reading, XidEvent
from portal.telemetry.services import host_token_issue
from tests.telemetry.batches import post_batch

HOSTNAME = "dgx-07"


@pytest.fixture(autouse=True)
def _ingest_settings(request, settings, monkeypatch):
    """A fresh rate limiter per test (its buckets are keyed by token pk, which repeats across
    tests), and the database work on the request's thread unless the test commits for real."""
    ingest_view._limiter = None
    marker = request.node.get_closest_marker("django_db")
    commits = (
        "transactional_db" in request.fixturenames
        or "live_server" in request.fixturenames
        or (marker is not None and marker.kwargs.get("transaction", False))
    )
    if not commits:
        monkeypatch.setattr(ingest_view, "run_in_pool", False)
    yield
    ingest_view._limiter = None


@dataclass
class Agent:
    host: Host
    token: str
    record: object
    client: Client

    @property
    def hostname(self):
        return self.host.hostname

    def post(self, batch=None, **kwargs):
        return post_batch(self.client, self.token, batch, **kwargs)


def agent_for(hostname: str) -> Agent:
    issued = host_token_issue(hostname=hostname, label="tests", create_host=True)
    return Agent(host=issued.record.host, token=issued.token, record=issued.record, client=Client())


@pytest.fixture
def agent(db):
    """Host dgx-07 and a live token for it, ready to post batches."""
    return agent_for(HOSTNAME)


@pytest.fixture
def other_agent(db):
    return agent_for("dgx-99")


def table_counts() -> dict[str, int]:
    return {
        "batches": IngestBatch.objects.count(),
        "readings": Reading.objects.count(),
        "xids": XidEvent.objects.count(),
        "latest": GpuLatest.objects.count(),
        "gpus": Gpu.objects.count(),
        "records": MaintenanceRecord.objects.count(),
    }


@pytest.fixture
def counts():
    return table_counts
