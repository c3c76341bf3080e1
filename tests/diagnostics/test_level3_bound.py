"""One level-3 diagnostic pending per host (portal.diagnostics.limits): a second one, by a
technician or an admin, through the API or the host page, is a 409 naming `level` and a line in
the audit trail; lower levels, other hosts, and the next level 3 once the first has ended are not
held back."""

import datetime as dt
import json

import pytest
from auditlog.models import LogEntry
from django.utils import timezone

from portal.diagnostics import services
from portal.diagnostics.models import Diagnostic
from portal.fleet.models import Host
from tests.diagnostics.conftest import agent_for, result_body
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db


def request_diag(client, hostname, body):
    return client.post(f"/api/v1/hosts/{hostname}/diagnostics", json.dumps(body), content_type="application/json")


def refusals(host):
    return LogEntry.objects.filter(content_type__model="host", object_pk=str(host.pk), action=LogEntry.Action.ACCESS)


@pytest.mark.parametrize("role", ["technician", "admin"])
def test_a_second_level_3_while_one_is_pending_is_409_naming_level_and_audited(client_for, actors, agent, gpus, role):
    client = client_for(actors[role])
    first = request_diag(client, agent.host.hostname, {"level": 3})
    assert first.status_code == 201, first.content

    again = request_diag(client, agent.host.hostname, {"level": 3, "gpus": [gpus[1].uuid]})
    assert again.status_code == 409, again.content
    problems = again.json()["detail"]
    assert [problem["loc"] for problem in problems] == ["level"]
    assert first.json()["id"] in problems[0]["msg"] and "one at a time" in problems[0]["msg"]
    assert Diagnostic.objects.filter(level=3).count() == 1

    entry = refusals(agent.host).get()
    assert entry.actor == actors[role] and entry.object_repr == agent.host.hostname
    assert entry.changes_dict["diagnostic refused"][1] == f"level 3: {first.json()['id']} is requested"


def test_lower_levels_and_other_hosts_are_not_held_back(client_for, technician, agent, gpus):
    client = client_for(technician)
    assert request_diag(client, agent.host.hostname, {"level": 3}).status_code == 201
    assert request_diag(client, agent.host.hostname, {"level": 1}).status_code == 201
    assert request_diag(client, agent.host.hostname, {"level": 2}).status_code == 201
    other = agent_for("dgx-08")
    GpuFactory(host=other.host, index=0)
    assert request_diag(client, other.host.hostname, {"level": 3}).status_code == 201
    assert not LogEntry.objects.filter(action=LogEntry.Action.ACCESS, content_type__model="host").exists()


def test_a_running_one_holds_the_slot_and_its_result_frees_it(client_for, technician, agent, gpus):
    client = client_for(technician)
    diagnostic_id = request_diag(client, agent.host.hostname, {"level": 3}).json()["id"]
    services.diagnostic_started(diagnostic_id=diagnostic_id, host=agent.host, started_at=timezone.now())
    assert request_diag(client, agent.host.hostname, {"level": 3}).status_code == 409
    assert agent.result(diagnostic_id, result_body(gpus)).status_code == 200
    assert request_diag(client, agent.host.hostname, {"level": 3}).status_code == 201


def test_an_expired_one_frees_the_slot_even_before_the_sweep(client_for, technician, agent, gpus):
    client = client_for(technician)
    diagnostic_id = request_diag(client, agent.host.hostname, {"level": 3}).json()["id"]
    Diagnostic.objects.filter(pk=diagnostic_id).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert request_diag(client, agent.host.hostname, {"level": 3}).status_code == 201


def test_the_portals_own_level_3_requests_are_not_bounded(client_for, technician, agent, gpus):
    """Burn-in at level 3 is due whatever a person queued."""
    request_diag(client_for(technician), agent.host.hostname, {"level": 3})
    burn_in = services.diagnostic_request(host=agent.host, level=3, gpus=gpus, purpose=Diagnostic.Purpose.BURN_IN)
    assert burn_in.level == 3 and Diagnostic.objects.filter(level=3).count() == 2


def test_the_host_page_form_says_why_and_audits_the_refusal(client_for, technician, agent, gpus):
    client = client_for(technician)
    assert client.post(f"/diagnostics/hosts/{agent.host.hostname}/request", {"level": "3"}).status_code == 302
    answer = client.post(f"/diagnostics/hosts/{agent.host.hostname}/request", {"level": "3"}, follow=True)
    page = answer.content.decode()
    assert "Diagnostic not requested" in page and "level-3 diagnostic pending" in page
    assert Diagnostic.objects.filter(level=3).count() == 1
    assert refusals(Host.objects.get(pk=agent.host.pk)).get().actor == technician
