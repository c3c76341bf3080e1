from dataclasses import dataclass

import pytest
from django.test import Client

from portal.remote_write import mapping, write_view
from portal.remote_write.models import IngestSource
from portal.remote_write.services.sources import ingest_source_issue
from portal.telemetry import ingest_view


@pytest.fixture(autouse=True)
def _write_settings(request, monkeypatch):
    write_view._limiter = None
    mapping._identities.clear()
    if "transactional_db" not in request.fixturenames and "live_server" not in request.fixturenames:
        monkeypatch.setattr(write_view, "run_in_pool", False)
        monkeypatch.setattr(ingest_view, "run_in_pool", False)  # the agents' endpoint, for comparisons
    yield
    write_view._limiter = None


@dataclass
class Source:
    record: IngestSource
    token: str
    client: Client


@pytest.fixture
def source(db):
    issued = ingest_source_issue(name="lab-prometheus", hosts="prom-*")
    return Source(record=issued.record, token=issued.token, client=Client())
