"""GET /api/v1/hosts/{hostname}/scheduler and the manual drain/resume, against real Slurm."""

import json
import time

import pytest
from auditlog.models import LogEntry

from portal.fleet.models import Host
from portal.scheduler.models import SchedulerAction
from tests.scheduler.helpers import enrol, node

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(settings, cluster):
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "cli"
    settings.SLURM_BIN_DIR = ""
    return cluster


@pytest.fixture
def host(slurm, db):
    return enrol(slurm.node)[0]


def url(hostname: str, action: str = "") -> str:
    return f"/api/v1/hosts/{hostname}/scheduler" + (f"/{action}" if action else "")


def post(client, path, body=None):
    return client.post(path, json.dumps(body) if body is not None else "", content_type="application/json")


def test_get_shows_state_reason_and_running_jobs(slurm, host, client_for, viewer):
    job = slurm.sbatch("--gres=gpu:1", "-J", "bert <pretrain>", "--wrap", "sleep 600")
    slurm.wait_running(job)
    response = client_for(viewer).get(url(host.hostname))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["node"] == slurm.node and body["state"] == "mixed" and body["reason"] == ""
    [entry] = body["jobs"]
    assert entry["id"] == job and entry["user"] == "root" and entry["name"] == "bert <pretrain>"
    assert entry["gpus"] == [0] and entry["start"].endswith("Z") or entry["start"].endswith("+00:00")
    assert set(entry) == {"id", "user", "name", "gpus", "start"}

    page = client_for(viewer).get(host.get_absolute_url()).content.decode()
    assert f"Slurm node {slurm.node}" in page and "bert &lt;pretrain&gt;" in page
    assert 'action="/scheduler/hosts/' not in page  # a viewer gets no buttons


def test_reading_the_node_needs_the_viewer_role(slurm, host, client_for, outsider, slurm_calls):
    """Job users and names are not for every account, and a refused read costs Slurm nothing."""
    job = slurm.sbatch("--gres=gpu:1", "-J", "secret-project", "--wrap", "sleep 600")
    slurm.wait_running(job)
    refused = client_for(outsider).get(url(host.hostname))
    assert refused.status_code == 403 and "secret-project" not in refused.content.decode()
    assert "scheduler.view_scheduleraction" in refused.json()["error"]
    assert client_for(None).get(url(host.hostname)).status_code == 401
    assert client_for(outsider).get(url("no-such-host")).status_code == 403  # nor whether a host exists
    assert slurm_calls() == []


class StoppedCacheClock:
    """The local-memory cache's clock, stopped so that a slow machine cannot end the window
    while it serves the reads, and moved on by hand; everything else keeps the real time."""

    def __init__(self):
        self.now = time.time()

    def time(self) -> float:
        return self.now


def test_one_answer_per_node_serves_reads_for_a_few_seconds(
    slurm, host, client_for, viewer, technician, slurm_calls, monkeypatch
):
    from django.core.cache.backends import locmem

    from portal.scheduler.services import NODE_STATUS_CACHE_S

    clock = StoppedCacheClock()
    monkeypatch.setattr(locmem, "time", clock)
    first = client_for(viewer).get(url(host.hostname))
    assert first.status_code == 200 and first.json()["state"] == "idle"
    asked = len(slurm_calls())
    assert asked >= 2 and any(c.startswith("sinfo") for c in slurm_calls())
    assert any(c.startswith("squeue") for c in slurm_calls())

    for _ in range(5):  # API and host page alike, any reader
        assert client_for(viewer).get(url(host.hostname)).json() == first.json()
    assert f"Slurm node {slurm.node}" in client_for(technician).get(host.get_absolute_url()).content.decode()
    assert len(slurm_calls()) == asked  # not one more Slurm command

    # A drain through the portal is seen at once: the portal forgets the answer it kept.
    drained = post(client_for(technician), url(host.hostname, "drain"), {"reason": "window"})
    assert drained.status_code == 200 and drained.json()["state"] == "drained"
    assert client_for(viewer).get(url(host.hostname)).json()["state"] == "drained"

    # A change made outside the portal shows once the window is over.
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=RESUME")
    assert client_for(viewer).get(url(host.hostname)).json()["state"] == "drained"
    clock.now = time.time() + NODE_STATUS_CACHE_S + 1
    asked = len(slurm_calls())
    assert client_for(viewer).get(url(host.hostname)).json()["state"] != "drained"
    assert len(slurm_calls()) > asked


def test_technician_drains_and_resumes_by_hand(slurm, host, client_for, technician):
    client = client_for(technician)
    response = post(client, url(host.hostname, "drain"), {"reason": "window: new PDU\n; rm -rf /"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "drained" and body["reason"] == "window: new PDU ; rm -rf /"
    action = SchedulerAction.objects.get(kind="drain")
    assert action.state == "done" and action.requested_by == technician and action.source == "person"
    entry = LogEntry.objects.get_for_object(action).filter(action=LogEntry.Action.CREATE).get()
    assert entry.actor == technician
    trail = client.get("/audit/", {"model": "scheduler"})
    assert trail.status_code == 200 and f"drain {slurm.node}" in trail.content.decode()

    page = client.get(host.get_absolute_url()).content.decode()
    assert "window: new PDU ; rm -rf /" in page and f'action="/scheduler/hosts/{host.hostname}/drain"' in page

    response = post(client, url(host.hostname, "resume"), {})
    assert response.status_code == 200, response.content
    assert "drain" not in response.json()["state"] and response.json()["reason"] == ""
    assert node(slurm).state.split("+")[0] == "idle"


def test_host_page_buttons_drain_and_resume(slurm, host, client_for, admin):
    client = client_for(admin)
    response = client.post(f"/scheduler/hosts/{host.hostname}/drain", {"reason": "firmware window"})
    assert response.status_code == 302
    assert node(slurm).reason == "firmware window"
    response = client.post(f"/scheduler/hosts/{host.hostname}/drain", {"reason": "  "}, follow=True)
    assert "reason: say why the node is drained" in response.content.decode()
    client.post(f"/scheduler/hosts/{host.hostname}/resume", {})
    assert "drain" not in node(slurm).state


def test_bad_input(slurm, host, client_for, technician, viewer, settings):
    client = client_for(technician)
    missing = post(client, url(host.hostname, "drain"), {})
    assert missing.status_code == 400 and missing.json()["detail"][0]["loc"] == "reason"
    blank = post(client, url(host.hostname, "drain"), {"reason": " \n "})
    assert blank.status_code == 400 and blank.json()["detail"][0]["loc"] == "reason"
    assert post(client_for(viewer), url(host.hostname, "drain"), {"reason": "x"}).status_code == 403
    assert client_for(viewer).post(f"/scheduler/hosts/{host.hostname}/drain", {"reason": "x"}).status_code == 403
    assert client.get(url("no-such-host")).status_code == 404
    assert post(client, url("no-such-host", "drain"), {"reason": "x"}).status_code == 404
    Host.objects.create(hostname="no-node-07", slurm_node="nonode07")
    unknown = client.get(url("no-node-07"))
    assert unknown.status_code == 404 and "nonode07" in unknown.json()["error"]
    page = client.get("/hosts/no-node-07/").content.decode()
    assert "Slurm has no node &#x27;nonode07&#x27;: this host is not in Slurm" in page
    assert post(client, url("no-node-07", "drain"), {"reason": "x"}).status_code == 404
    assert not SchedulerAction.objects.exists()  # refused: nothing written
    assert node(slurm).state == "idle"  # nothing was drained by any of it

    settings.SLURM_ENABLED = False
    assert client.get(url(host.hostname)).status_code == 404


def test_slurm_unreachable_is_503_naming_the_cause_and_retried(slurm, host, client_for, technician, settings, tmp_path):
    settings.SLURM_BIN_DIR = str(tmp_path)  # no commands there: Slurm cannot be reached
    client = client_for(technician)
    response = client.get(url(host.hostname))
    assert response.status_code == 503 and "sinfo not found" in response.json()["error"]
    response = post(client, url(host.hostname, "drain"), {"reason": "window"})
    assert response.status_code == 503 and response.json()["detail"][0]["loc"] == "slurm"
    action = SchedulerAction.objects.get()
    assert action.state == "pending" and "not found" in action.last_error
    page = client.get(host.get_absolute_url())
    assert page.status_code == 200 and "Slurm did not answer" in page.content.decode()

    from portal.scheduler.services import scheduler_sweep

    settings.SLURM_BIN_DIR = ""
    scheduler_sweep()
    assert node(slurm).reason == "window"


def test_openapi_describes_the_answers(client_for, viewer):
    schema = client_for(viewer).get("/api/v1/openapi.json").json()
    drain = schema["paths"]["/api/v1/hosts/{hostname}/scheduler/drain"]["post"]
    assert {"200", "400", "403", "404", "503"} <= set(drain["responses"])


def test_host_form_takes_a_slurm_node_and_refuses_a_bad_one(client_for, admin):
    host = Host.objects.create(hostname="dgx-31")
    edit = f"/hosts/{host.hostname}/edit/"
    fields = {"hostname": "dgx-31", "status": "active"}
    answer = client_for(admin).post(edit, {**fields, "slurm_node": "gpu31 State=RESUME"})
    assert answer.status_code == 400 and "slurm_node" in answer.context["form"].errors
    host.refresh_from_db()
    assert host.slurm_node == ""
    assert client_for(admin).post(edit, {**fields, "slurm_node": "gpu31"}).status_code == 302
    host.refresh_from_db()
    assert host.slurm_node == "gpu31"


def test_a_reason_is_one_argument_whatever_it_holds(slurm, host, client_for, admin):
    reason = "x State=RESUME NodeName=other Weight=9 `id` $(id) && true"
    response = post(client_for(admin), url(host.hostname, "drain"), {"reason": reason})
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "drained" and response.json()["reason"] == reason
    assert "Weight=1 " in slurm.node_line()


def test_token_drain_and_resume_are_the_token_users(slurm, host, technician):
    """`Authorization: Token …` writes are credited to the token's user in the audit trail."""
    from django.test import Client

    from portal.accounts.services import api_token_issue

    secret, _ = api_token_issue(user=technician)
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {secret}")
    assert post(client, url(host.hostname, "drain"), {"reason": "PDU swap"}).status_code == 200
    assert post(client, url(host.hostname, "resume"), {}).status_code == 200
    actions = SchedulerAction.objects.filter(kind__in=["drain", "resume"])
    assert {action.kind for action in actions} == {"drain", "resume"}
    assert all(action.requested_by == technician for action in actions)
    entries = LogEntry.objects.get_for_model(SchedulerAction)
    assert entries.exists() and {entry.actor_id for entry in entries} == {technician.pk}
