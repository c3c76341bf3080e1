"""The diagnostics API (portal-api-v1.md, "Diagnostics and return to service"): request, read,
the agent's start and result (host token), every status code, bad input naming the field."""

import datetime as dt
import json
import uuid as uuidlib

import pytest
from django.utils import timezone

from portal.diagnostics import services
from portal.diagnostics.models import Diagnostic, DiagnosticGpu, DiagnosticTest
from portal.fleet.models import Gpu
from portal.maintenance.models import Ticket
from tests.diagnostics.conftest import agent_for, result_body
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


def request_diag(client, hostname, body):
    return client.post(f"/api/v1/hosts/{hostname}/diagnostics", json.dumps(body), content_type="application/json")


def test_request_201_as_get_shows_it(client_for, technician, agent, gpus):
    answer = request_diag(client_for(technician), agent.host.hostname, {"level": 2})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["state"] == "requested" and body["level"] == 2 and body["host"] == agent.host.hostname
    assert body["requested_by"] == technician.username and body["started_at"] is None
    assert [gpu["uuid"] for gpu in body["gpus"]] == [gpu.uuid for gpu in gpus]
    assert all(gpu["result"] is None and gpu["tests"] == [] for gpu in body["gpus"])
    assert client_for(technician).get(f"/api/v1/diagnostics/{body['id']}").json() == body
    # 1 h to run at level 1-2.
    diagnostic = Diagnostic.objects.get(pk=body["id"])
    assert diagnostic.expires_at - diagnostic.requested_at == dt.timedelta(hours=1)


def test_request_all_means_in_service_or_out_for_repair(client_for, admin, agent, gpus):
    Gpu.objects.filter(pk=gpus[0].pk).update(status="retired")
    third = GpuFactory(host=agent.host, index=5, status="out_for_repair")
    body = request_diag(client_for(admin), agent.host.hostname, {"level": 3}).json()
    assert [gpu["uuid"] for gpu in body["gpus"]] == [gpus[1].uuid, third.uuid]
    diagnostic = Diagnostic.objects.get(pk=body["id"])
    assert diagnostic.expires_at - diagnostic.requested_at == dt.timedelta(hours=4)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, "level"),
        ({"level": 0}, "level"),
        ({"level": 4}, "level"),
        ({"level": "high"}, "level"),
        ({"level": True}, "level"),
        ({"level": 1, "gpus": []}, "gpus"),
        ({"level": 1, "gpus": ["GPU-nope"]}, "gpus"),
        ({"level": 1, "gpus": "GPU-x"}, "gpus"),
        ({"level": 1, "colour": "red"}, "colour"),
    ],
)
def test_request_bad_input_400_names_the_field(client_for, admin, agent, gpus, body, loc):
    answer = request_diag(client_for(admin), agent.host.hostname, body)
    assert answer.status_code == 400, answer.content
    assert loc in [problem["loc"] for problem in answer.json()["detail"]]
    assert not Diagnostic.objects.exists() and not DiagnosticGpu.objects.exists()


def test_request_another_hosts_gpu_or_a_retired_one_400_naming_gpus(client_for, admin, agent, gpus):
    foreign = GpuFactory(host=HostFactory(hostname="elsewhere"))
    retired = GpuFactory(host=agent.host, index=6, status="retired")
    for uuid in (foreign.uuid, retired.uuid):
        answer = request_diag(client_for(admin), agent.host.hostname, {"level": 1, "gpus": [gpus[0].uuid, uuid]})
        assert answer.status_code == 400
        assert answer.json()["detail"][0]["loc"] == "gpus" and uuid in answer.json()["detail"][0]["msg"]
    assert not Diagnostic.objects.exists()


def test_request_unknown_host_404_and_roles(client_for, actors, agent, gpus):
    assert request_diag(client_for(actors["admin"]), "no-such-host", {"level": 1}).status_code == 404
    assert request_diag(client_for(actors["viewer"]), agent.host.hostname, {"level": 1}).status_code == 403
    assert request_diag(client_for(actors["outsider"]), agent.host.hostname, {"level": 1}).status_code == 403
    assert request_diag(client_for(None), agent.host.hostname, {"level": 1}).status_code == 401
    assert not Diagnostic.objects.exists()


def test_get_404_and_roles(client_for, viewer, outsider, agent, gpus):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    assert client_for(viewer).get(f"/api/v1/diagnostics/{diagnostic.pk}").status_code == 200
    assert client_for(outsider).get(f"/api/v1/diagnostics/{diagnostic.pk}").status_code == 403
    assert client_for(viewer).get(f"/api/v1/diagnostics/{uuidlib.uuid4()}").status_code == 404
    assert client_for(viewer).get("/api/v1/diagnostics/not-a-uuid").status_code == 404


def test_gpu_list_newest_first(client_for, viewer, agent, gpus):
    now = timezone.now()
    old = services.diagnostic_request(host=agent.host, level=1, now=now - dt.timedelta(days=2))
    new = services.diagnostic_request(host=agent.host, level=2, gpu_uuids=[gpus[0].uuid], now=now)
    services.diagnostic_request(host=agent.host, level=3, gpu_uuids=[gpus[1].uuid], now=now)
    listed = client_for(viewer).get(f"/api/v1/gpus/{gpus[0].uuid}/diagnostics").json()
    assert [d["id"] for d in listed] == [str(new.pk), str(old.pk)]
    assert client_for(viewer).get("/api/v1/gpus/GPU-unknown/diagnostics").status_code == 404


# --- the agent's side -------------------------------------------------------------------------


def test_started_alone_202_running_and_no_longer_offered(agent, gpus):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    assert services.host_commands(host_id=agent.host.pk) == [
        {"id": str(diagnostic.pk), "kind": "diagnose", "level": 1, "gpus": sorted(g.uuid for g in gpus)}
    ]
    answer = agent.result(diagnostic.pk, {"started_at": timezone.now().isoformat()})
    assert answer.status_code == 202, answer.content
    assert answer.json()["state"] == "running"
    assert services.host_commands(host_id=agent.host.pk) == []


def test_result_200_passed_with_tests(agent, gpus):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    answer = agent.result(diagnostic.pk, result_body(gpus))
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["state"] == "passed" and body["tool"] == "dcgmi" and body["driver_version"] == "580.65.06"
    assert [gpu["result"] for gpu in body["gpus"]] == ["pass", "pass"]
    assert [t["name"] for t in body["gpus"][0]["tests"]] == ["Deployment", "PCIe"]
    assert body["finished_at"] is not None
    assert not Ticket.objects.exists()


def test_result_twice_409_and_nothing_changes(agent, gpus):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    assert agent.result(diagnostic.pk, result_body(gpus)).status_code == 200
    tests = DiagnosticTest.objects.count()
    again = agent.result(diagnostic.pk, result_body(gpus, {gpus[0].uuid: "fail"}))
    assert again.status_code == 409
    assert agent.result(diagnostic.pk, {"started_at": timezone.now().isoformat()}).status_code == 409
    assert DiagnosticTest.objects.count() == tests
    assert Diagnostic.objects.get(pk=diagnostic.pk).state == "passed"


def test_result_for_another_hosts_diagnostic_404(agent, gpus):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    other = agent_for("dgx-99")
    assert other.result(diagnostic.pk, result_body(gpus)).status_code == 404
    assert other.result(uuidlib.uuid4(), result_body(gpus)).status_code == 404
    assert agent.result("nonsense", result_body(gpus)).status_code == 404
    assert Diagnostic.objects.get(pk=diagnostic.pk).state == "requested"


def test_result_without_or_with_a_bad_token_401(agent, gpus, client):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    assert agent.result(diagnostic.pk, result_body(gpus), token="gfh_wrong").status_code == 401
    answer = client.post(
        f"/api/v1/diagnostics/{diagnostic.pk}/result", json.dumps(result_body(gpus)), content_type="application/json"
    )
    assert answer.status_code == 401


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        (lambda b: b.pop("started_at"), "started_at"),
        (lambda b: b.update(started_at="yesterday"), "started_at"),
        (lambda b: b.update(started_at="2026-01-01T00:00:00"), "started_at"),  # no zone
        (lambda b: b.pop("tool"), "tool"),
        (lambda b: b.update(tool="bash -c reboot"), "tool"),
        (lambda b: b.pop("gpus"), "gpus"),
        (lambda b: b["gpus"][0].update(result="great"), "gpus.0.result"),
        (lambda b: b["gpus"][0].update(uuid="GPU-not-in-it"), "gpus.0.uuid"),
        (lambda b: b["gpus"][1]["tests"][0].update(result="meh"), "gpus.1.tests.0.result"),
        (lambda b: b["gpus"][1]["tests"][0].pop("name"), "gpus.1.tests.0.name"),
        (lambda b: b.update(finished_at="2020-01-01T00:00:00Z"), "finished_at"),  # before started_at
        (lambda b: b.update(finished_at="2099-01-01T00:00:00Z"), "finished_at"),  # the future
    ],
)
def test_result_bad_input_400_names_the_field_and_stores_nothing(agent, gpus, change, loc):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    body = result_body(gpus)
    change(body)
    answer = agent.result(diagnostic.pk, body)
    assert answer.status_code == 400, answer.content
    assert loc in [problem["loc"] for problem in answer.json()["detail"]], answer.json()
    diagnostic.refresh_from_db()
    assert diagnostic.state == "requested" and diagnostic.result_at is None
    assert not DiagnosticTest.objects.exists()
    assert set(DiagnosticGpu.objects.values_list("result", flat=True)) == {""}


def test_states_pass_warn_fail_and_skip_never_passes(agent, gpus):
    def outcome(results, tests=None):
        diagnostic = services.diagnostic_request(host=agent.host, level=1)
        body = agent.result(diagnostic.pk, result_body(gpus, results, tests=tests)).json()
        return body["state"], [gpu["result"] for gpu in body["gpus"]]

    a, b = gpus
    assert outcome({a.uuid: "warn"}) == ("warned", ["warn", "pass"])
    assert outcome({a.uuid: "fail", b.uuid: "warn"}) == ("failed", ["fail", "warn"])
    every_skip = [{"name": "Memory", "category": "Hardware", "result": "skip", "info": "no DCGM"}]
    assert outcome({a.uuid: "pass"}, tests={a.uuid: every_skip, b.uuid: every_skip}) == ("failed", ["skip", "skip"])
    # A failing test makes the GPU fail whatever the agent summed up.
    failing = [{"name": "Diagnostic", "category": "Hardware", "result": "fail", "info": "SM stress"}]
    assert outcome({}, tests={a.uuid: failing}) == ("failed", ["fail", "pass"])


def test_a_gpu_missing_from_the_result_is_skip(agent, gpus):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    body = result_body(gpus)
    body["gpus"] = body["gpus"][:1]
    answer = agent.result(diagnostic.pk, body).json()
    assert answer["state"] == "failed" and [gpu["result"] for gpu in answer["gpus"]] == ["pass", "skip"]


# --- tickets ----------------------------------------------------------------------------------


def test_failed_opens_a_critical_ticket_per_failing_gpu_naming_tests_with_output(agent, gpus, client_for, viewer):
    diagnostic = services.diagnostic_request(host=agent.host, level=2)
    hostile = "<script>alert(1)</script> ECC DBE at 0x1f"
    tests = {
        gpus[0].uuid: [
            {"name": "Memory", "category": "Hardware", "result": "fail", "info": hostile},
            {"name": "PCIe", "category": "Integration", "result": "pass", "info": ""},
            {"name": "Diagnostic", "category": "Hardware", "result": "fail", "info": "SM stress: 3 errors"},
        ]
    }
    agent.result(diagnostic.pk, result_body(gpus, {gpus[0].uuid: "fail"}, tests=tests))
    (ticket,) = Ticket.objects.all()
    assert ticket.rule == "diagnostic_failed" and ticket.severity == "critical" and ticket.gpu_id == gpus[0].pk
    assert ticket.title == f"Diagnostic failed: GPU 0 on {agent.host.hostname}"
    note = ticket.events.get(kind="opened").note
    assert "Memory, Diagnostic" in note and str(diagnostic.pk) in note and "PCIe" not in note
    tests_kept = ticket.evidence["diagnostic"]["tests"]
    assert [(t["name"], t["info"]) for t in tests_kept] == [("Memory", hostile), ("Diagnostic", "SM stress: 3 errors")]
    page = client_for(viewer).get(ticket.get_absolute_url())
    html = page.content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; ECC DBE" in html and "<script>alert(1)" not in html


def test_warned_opens_a_warning_ticket(agent, gpus):
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    tests = {gpus[1].uuid: [{"name": "Deployment", "category": "Deployment", "result": "warn", "info": "persistence"}]}
    agent.result(diagnostic.pk, result_body(gpus, {gpus[1].uuid: "warn"}, tests=tests))
    (ticket,) = Ticket.objects.all()
    assert (ticket.rule, ticket.severity, ticket.gpu_id) == ("diagnostic_warned", "warning", gpus[1].pk)


# --- expiry -----------------------------------------------------------------------------------


def test_expiry_after_1h_or_4h_and_an_expired_one_is_no_longer_offered(agent, gpus):
    now = timezone.now()
    quick = services.diagnostic_request(host=agent.host, level=2, now=now - dt.timedelta(minutes=61))
    long_ = services.diagnostic_request(host=agent.host, level=3, now=now - dt.timedelta(minutes=61))
    running = services.diagnostic_request(host=agent.host, level=1, now=now - dt.timedelta(minutes=90))
    services.diagnostic_started(diagnostic_id=running.pk, host=agent.host, started_at=now - dt.timedelta(minutes=89))
    # Offered only while requested and not past its time (before the sweep too).
    assert [c["id"] for c in services.host_commands(host_id=agent.host.pk)] == [str(long_.pk)]
    assert services.diagnostics_expire(now=now) == 2
    assert services.diagnostics_expire(now=now) == 0
    states = dict(Diagnostic.objects.values_list("pk", "state"))
    assert (states[quick.pk], states[long_.pk], states[running.pk]) == ("expired", "requested", "expired")
    assert services.diagnostics_expire(now=now + dt.timedelta(hours=3)) == 1
    # An expired diagnostic takes neither a start nor a late result: both 409, nothing written.
    refused = agent.result(quick.pk, {"started_at": now.isoformat()})
    assert refused.status_code == 409 and refused.json()["detail"][0]["loc"] == "state"
    late = agent.result(running.pk, result_body(gpus))
    assert late.status_code == 409 and late.json()["detail"][0]["loc"] == "state"
    running.refresh_from_db()
    assert (running.state, running.result_at, running.tool) == ("expired", None, "")
    assert not DiagnosticTest.objects.filter(gpu_result__diagnostic=running).exists()


def test_expiry_task_is_on_the_beat_schedule(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["diagnostics-expire"]
    assert entry["task"] == "portal.diagnostics.tasks.diagnostics_expire_task"


def test_xid_output_prints_times_in_the_portals_format(agent, gpus, client_for, viewer):
    # The agent writes RFC 3339 times (agents/diagnose.py); pages print them as every other time
    # (issue 48), in the reader's zone, escaped as the rest of the output.
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    info = "1 XID error(s) since 2026-12-02T10:00:05.120Z: XID 79 at 2026-12-02T10:03:00.000Z <b>"
    tests = {gpus[0].uuid: [{"name": "XID errors", "category": "Hardware", "result": "fail", "info": info}]}
    agent.result(diagnostic.pk, result_body(gpus, {gpus[0].uuid: "fail"}, tests=tests))
    (ticket,) = Ticket.objects.all()
    for url in (ticket.get_absolute_url(), gpus[0].get_absolute_url()):
        html = client_for(viewer).get(url).content.decode()
        assert "since 2026-12-02 10:00:05: XID 79 at 2026-12-02 10:03:00 &lt;b&gt;" in html, url
        assert "T10:03:00.000Z" not in html
