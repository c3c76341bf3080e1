"""Fixtures for the diagnostics tests: a host with a token and GPUs, clients for the API."""

import datetime as dt
import json
from dataclasses import dataclass

import pytest
from django.test import Client
from django.utils import timezone

from portal.fleet.models import Host
from portal.telemetry import ingest_view
from portal.telemetry.services import host_token_issue
from tests.factories import GpuFactory

HOSTNAME = "dgx-07"
DRIVER = "580.65.06"


@pytest.fixture(autouse=True)
def _ingest_on_the_request_thread(monkeypatch, request):
    ingest_view._limiter = None
    if "transactional_db" not in request.fixturenames and "live_server" not in request.fixturenames:
        monkeypatch.setattr(ingest_view, "run_in_pool", False)


@dataclass
class Agent:
    host: Host
    token: str
    client: Client

    def result(self, diagnostic_id, body, token=None):
        return self.client.post(
            f"/api/v1/diagnostics/{diagnostic_id}/result", json.dumps(body, default=str),
            content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token or self.token}",
        )  # fmt: skip


def agent_for(hostname: str) -> Agent:
    issued = host_token_issue(hostname=hostname, label="tests", create_host=True)
    host = issued.record.host
    Host.objects.filter(pk=host.pk).update(driver_version=DRIVER)
    host.refresh_from_db()
    return Agent(host=host, token=issued.token, client=Client())


@pytest.fixture
def agent(db):
    return agent_for(HOSTNAME)


@pytest.fixture
def gpus(agent):
    return [GpuFactory(host=agent.host, index=i, uuid=f"GPU-0000000{i}-6b9b-4b4e-9d0a-6f1c1a2b3c4d") for i in range(2)]


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def result_body(gpus, results=None, *, started=None, finished=None, tests=None, driver=DRIVER, tool="dcgmi"):
    """A whole result as the agent posts it: every GPU `pass` unless `results` says otherwise."""
    now = timezone.now()
    started = started or now - dt.timedelta(seconds=30)
    finished = finished or now - dt.timedelta(seconds=1)
    results = results or {}
    body_gpus = []
    for gpu in gpus:
        result = results.get(gpu.uuid, "pass")
        body_gpus.append({
            "uuid": gpu.uuid, "result": result,
            "tests": (tests or {}).get(gpu.uuid) or [
                {"name": "Deployment", "category": "Deployment", "result": "pass", "info": ""},
                {"name": "PCIe", "category": "Integration", "result": result, "info": f"PCIe {result}"},
            ],
        })  # fmt: skip
    return {
        "started_at": iso(started), "finished_at": iso(finished), "tool": tool, "tool_version": "3.3.9",
        "driver_version": driver, "gpus": body_gpus,
    }  # fmt: skip
