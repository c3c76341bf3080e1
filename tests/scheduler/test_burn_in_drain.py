"""A new GPU, or a card swapped in, takes no job before its burn-in passed: with BURN_IN_LEVEL on,
the host's node is drained (`gpu-fleet burn-in: <GPU>`) until it does, and resumed then by the
Scheduler section's rules (portal-api-v1.md, "Diagnostics and return to service"). Against the
session's real single-node Slurm cluster (cli mode)."""

import json

import pytest
from auditlog.models import LogEntry
from django.test import Client
from django.utils import timezone

from portal.diagnostics.models import Diagnostic
from portal.maintenance.models import Ticket
from portal.maintenance.services import ticket_transition
from portal.scheduler.models import SchedulerAction
from portal.scheduler.services import scheduler_sweep
from portal.telemetry import ingest_view
from tests.scheduler.helpers import GPUS, enrol, node, slurm_never_answers
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(settings, cluster, monkeypatch):
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "cli"
    settings.SLURM_BIN_DIR = ""
    settings.SLURM_DRAIN_SEVERITY = "critical"
    settings.BURN_IN_LEVEL = 1
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    return cluster


def report(capture, hostname: str, token: str, gpus=GPUS[:2]):
    """The agent's batch through the real ingest endpoint, committed (its after-commit work runs)."""
    with capture(execute=True):
        answer = post_batch(Client(), token, make_batch(hostname, gpus=list(gpus), readings=len(gpus)))
    assert answer.status_code == 202, answer.content
    return answer


def burn_in_result(capture, token: str, diagnostic: Diagnostic, result: str = "pass"):
    now = timezone.now().isoformat()
    gpus = [
        {"uuid": uuid, "result": result, "tests": [{"name": "Memory", "category": "Hardware", "result": result}]}
        for uuid in diagnostic.gpus.values_list("gpu__uuid", flat=True)
    ]
    body = {"started_at": now, "finished_at": now, "tool": "nvml", "gpus": gpus}
    with capture(execute=True):
        answer = Client().post(
            f"/api/v1/diagnostics/{diagnostic.pk}/result", json.dumps(body), content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )  # fmt: skip
    assert answer.status_code == 200, answer.content


def resume(client, hostname: str, body=None):
    return client.post(f"/api/v1/hosts/{hostname}/scheduler/resume", json.dumps(body or {}),
                       content_type="application/json")  # fmt: skip


def burn_in_of(host) -> Diagnostic:
    return Diagnostic.objects.filter(host=host, purpose="burn_in").order_by("-requested_at").first()


def test_a_new_hosts_gpus_keep_its_node_drained_until_their_burn_in_passes(
    slurm, django_capture_on_commit_callbacks, client_for, technician
):
    capture = django_capture_on_commit_callbacks
    host, token = enrol(slurm.node)
    report(capture, slurm.node, token)

    expected = f"gpu-fleet burn-in: GPU 0 ({GPUS[0]}), GPU 1 ({GPUS[1]})"
    state = node(slurm)
    assert "drain" in state.state and state.reason == expected
    assert f"Reason={expected}" in slurm.node_line()
    drain = SchedulerAction.objects.get(kind="drain", source="burn_in")
    assert (
        drain.state == "done"
        and drain.outcome == f"Slurm node {slurm.node} drained until the burn-in passes: {expected}"
    )
    assert LogEntry.objects.get_for_object(drain).filter(action=LogEntry.Action.CREATE).exists()

    # A hand resume meanwhile is refused, with the GPUs as its cause, and stays in the audit trail.
    answer = resume(client_for(technician), host.hostname, {"reason": "it is new, it works"})
    assert answer.status_code == 409, answer.content
    assert answer.json()["detail"] == [
        {"loc": "diagnostic", "msg": f"no burn-in diagnostic has passed yet on GPU 0 ({GPUS[0]}), GPU 1 ({GPUS[1]})"}
    ]
    refused = SchedulerAction.objects.get(source="person")
    assert refused.state == "skipped" and LogEntry.objects.get_for_object(refused).get().actor == technician
    assert "DRAIN" in slurm.node_line()

    burn_in_result(capture, token, burn_in_of(host))
    assert "DRAIN" not in slurm.node_line()
    resumed = SchedulerAction.objects.get(kind="resume", source="burn_in")
    assert resumed.state == "done" and resumed.outcome == f"Slurm node {slurm.node} resumed: its GPUs' burn-in passed"


def test_a_card_swapped_in_later_drains_the_node_again_for_itself(slurm, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    host, token = enrol(slurm.node)
    report(capture, slurm.node, token)
    burn_in_result(capture, token, burn_in_of(host))
    assert "DRAIN" not in slurm.node_line()

    new_card = gpu_uuid(9)
    report(capture, slurm.node, token, gpus=(GPUS[0], GPUS[1], new_card))
    assert node(slurm).reason == f"gpu-fleet burn-in: GPU 2 ({new_card})"
    burn_in_result(capture, token, burn_in_of(host))
    assert "DRAIN" not in slurm.node_line()


def test_a_failed_burn_in_keeps_the_node_drained_and_opens_a_ticket(
    slurm, django_capture_on_commit_callbacks, technician
):
    capture = django_capture_on_commit_callbacks
    host, token = enrol(slurm.node)
    report(capture, slurm.node, token)
    burn_in_result(capture, token, burn_in_of(host), result="fail")

    assert "DRAIN" in slurm.node_line() and node(slurm).reason.startswith("gpu-fleet burn-in: ")
    failed = Ticket.objects.filter(rule="diagnostic_failed", host=host, state="open")
    assert failed.count() == 2
    assert not SchedulerAction.objects.filter(kind="resume").exists()
    # Fixed: the tickets resolved, their diagnostic passes, which is the GPUs' passing burn-in too.
    with capture(execute=True):
        for ticket in failed:
            ticket_transition(ticket=ticket, to_state="resolved", user=technician)
    gates = list(Diagnostic.objects.filter(host=host, purpose="resume", state="requested"))
    assert len(gates) == 2 and "DRAIN" in slurm.node_line()
    burn_in_result(capture, token, gates[0])
    assert "DRAIN" in slurm.node_line()  # the other GPU has not passed yet
    burn_in_result(capture, token, gates[1])
    assert "DRAIN" not in slurm.node_line()


def test_a_node_a_person_drained_meanwhile_stays_drained(slurm, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    host, token = enrol(slurm.node)
    report(capture, slurm.node, token)
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=rack 4 power work")
    burn_in_result(capture, token, burn_in_of(host))
    state = node(slurm)
    assert "drain" in state.state and state.reason == "rack 4 power work"
    resumed = SchedulerAction.objects.get(kind="resume", source="burn_in")
    assert resumed.state == "skipped" and "a person drained it (rack 4 power work)" in resumed.outcome


def test_the_burn_in_drain_waits_for_another_draining_ticket(slurm, django_capture_on_commit_callbacks, technician):
    """An XID ticket opens during the burn-in: the burn-in's pass leaves the node drained for the
    ticket, whose own gate then resumes it."""
    from tests.scheduler.helpers import diagnostics_pass, post_xid

    capture = django_capture_on_commit_callbacks
    host, token = enrol(slurm.node)
    report(capture, slurm.node, token, gpus=GPUS)
    post_xid(capture, hostname=slurm.node, token=token, gpu_index=1)
    xid = Ticket.objects.get(rule="xid_bus", host=host)
    burn_in_result(capture, token, burn_in_of(host))
    assert "DRAIN" in slurm.node_line()
    assert SchedulerAction.objects.get(kind="resume", source="burn_in").outcome == (
        f"Slurm node {slurm.node} stays drained: ticket #{xid.pk} is open"
    )
    with capture(execute=True):
        ticket_transition(ticket=xid, to_state="resolved", user=technician)
    diagnostics_pass(capture, host=host, token=token)
    assert "DRAIN" not in slurm.node_line()


def test_the_burn_in_drain_is_retried_when_slurm_did_not_answer(
    slurm, django_capture_on_commit_callbacks, settings, tmp_path
):
    usual_timeout = slurm_never_answers(settings, tmp_path)
    host, token = enrol(slurm.node)
    report(django_capture_on_commit_callbacks, slurm.node, token)  # 202 all the same

    drain = SchedulerAction.objects.get(kind="drain", source="burn_in")
    assert drain.state == "pending" and "did not answer within 0.3 s" in drain.last_error
    assert "DRAIN" not in slurm.node_line()

    # Slurm answers again: the beat sweep drains it, its commands given the usual time (0.3 s was
    # for the stand-ins above; a loaded machine's sinfo can take longer).
    settings.SLURM_BIN_DIR = ""
    settings.SLURM_TIMEOUT = usual_timeout
    assert scheduler_sweep() >= 1
    drain.refresh_from_db()
    assert drain.state == "done" and node(slurm).reason.startswith("gpu-fleet burn-in: GPU 0 (")


def test_burn_in_off_changes_nothing(slurm, settings, django_capture_on_commit_callbacks):
    settings.BURN_IN_LEVEL = 0
    host, token = enrol(slurm.node)
    report(django_capture_on_commit_callbacks, slurm.node, token)
    assert not Diagnostic.objects.exists() and not SchedulerAction.objects.exists()
    assert "DRAIN" not in slurm.node_line()


def test_a_long_list_of_gpus_is_cut_to_fit(slurm, django_capture_on_commit_callbacks):
    host, token = enrol(slurm.node)
    report(django_capture_on_commit_callbacks, slurm.node, token, gpus=[gpu_uuid(n) for n in range(8)])
    reason = node(slurm).reason
    assert reason.startswith(f"gpu-fleet burn-in: GPU 0 ({gpu_uuid(0)}), GPU 1") and reason.endswith("…")
    assert len(reason) == 200


def test_an_admin_may_force_past_a_burn_in_and_it_is_recorded(
    slurm, django_capture_on_commit_callbacks, client_for, technician, admin
):
    host, token = enrol(slurm.node)
    report(django_capture_on_commit_callbacks, slurm.node, token)
    refused = resume(client_for(technician), host.hostname, {"force": True, "reason": "deadline"})
    assert refused.status_code == 403 and "DRAIN" in slurm.node_line()
    answer = resume(client_for(admin), host.hostname, {"force": True, "reason": "vendor-tested cards"})
    assert answer.status_code == 200, answer.content
    assert "DRAIN" not in slurm.node_line()
    forced = SchedulerAction.objects.get(source="person", forced=True)
    assert forced.outcome == (
        f"Slurm node {slurm.node} resumed by hand, forced past: no burn-in diagnostic has passed yet on "
        f"GPU 0 ({GPUS[0]}), GPU 1 ({GPUS[1]}): vendor-tested cards"
    )
    entries = [
        LogEntry.objects.get_for_object(a).filter(action=LogEntry.Action.CREATE).get()
        for a in SchedulerAction.objects.filter(source="person")
    ]
    assert sorted(entry.actor.username for entry in entries) == sorted([technician.username, admin.username])
