"""Resolving the ticket that drained a node requests a level-1 diagnostic of its GPUs; the node is
resumed when it passes and stays drained (the ticket reopened, naming the failing tests) when it
fails (portal-api-v1.md, "Diagnostics and return to service"). The real single-node Slurm cluster."""

import json

import pytest
from django.test import Client
from django.utils import timezone

from portal.diagnostics.models import Diagnostic
from portal.diagnostics.services import diagnostic_request
from portal.maintenance.models import Ticket, TicketEvent
from portal.maintenance.services import ticket_transition
from portal.scheduler.models import SchedulerAction
from portal.telemetry import ingest_view
from tests.scheduler.helpers import enrol, node, post_xid

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(settings, cluster, monkeypatch):
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "cli"
    settings.SLURM_BIN_DIR = ""
    settings.SLURM_DRAIN_SEVERITY = "critical"
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    return cluster


def post_result(capture, token, diagnostic, result="pass", info="ok"):
    now = timezone.now().isoformat()
    gpus = [
        {"uuid": row.gpu.uuid, "result": result,
         "tests": [{"name": "Memory", "category": "Hardware", "result": result, "info": info}]}
        for row in diagnostic.gpus.select_related("gpu")
    ]  # fmt: skip
    body = {"started_at": now, "finished_at": now, "tool": "nvml", "tool_version": "12.570", "gpus": gpus}
    with capture(execute=True):
        answer = Client().post(
            f"/api/v1/diagnostics/{diagnostic.pk}/result", json.dumps(body), content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )  # fmt: skip
    assert answer.status_code == 200, answer.content
    return answer


def notes(ticket):
    return list(ticket.events.order_by("id").values_list("note", flat=True))


def drained_and_resolved(slurm, capture, technician):
    host, token = enrol(slurm.node)
    post_xid(capture, hostname=slurm.node, token=token, gpu_index=0)
    ticket = Ticket.objects.get(rule="xid_bus", host=host)
    assert node(slurm).state in ("drained", "draining")
    with capture(execute=True):
        ticket_transition(ticket=ticket, to_state="resolved", user=technician, note="reseated")
    return host, token, ticket


def test_resolving_waits_for_a_passing_diagnostic_then_resumes(slurm, django_capture_on_commit_callbacks, technician):
    host, token, ticket = drained_and_resolved(slurm, django_capture_on_commit_callbacks, technician)
    (diagnostic,) = Diagnostic.objects.all()
    assert (diagnostic.level, diagnostic.purpose, diagnostic.ticket_id) == (1, "resume", ticket.pk)
    assert list(diagnostic.gpus.values_list("gpu_id", flat=True)) == [ticket.gpu_id]
    assert "DRAIN" in slurm.node_line()  # not resumed yet
    assert not SchedulerAction.objects.filter(kind="resume").exists()
    assert any(f"diagnostic {diagnostic.pk} requested" in note for note in notes(ticket))

    post_result(django_capture_on_commit_callbacks, token, diagnostic)

    assert "DRAIN" not in slurm.node_line()
    resume = SchedulerAction.objects.get(kind="resume", ticket=ticket)
    assert resume.state == "done"
    ticket.refresh_from_db()
    assert ticket.state == "resolved"


def test_a_failing_diagnostic_keeps_the_node_drained_and_reopens_the_ticket(
    slurm, django_capture_on_commit_callbacks, technician
):
    host, token, ticket = drained_and_resolved(slurm, django_capture_on_commit_callbacks, technician)
    diagnostic = Diagnostic.objects.get()
    post_result(django_capture_on_commit_callbacks, token, diagnostic, result="fail", info="DBE at 0x1f")
    assert "DRAIN" in slurm.node_line()
    ticket.refresh_from_db()
    assert ticket.state == "open"
    reopened = ticket.events.filter(kind=TicketEvent.Kind.STATE, to_state="open").get()
    assert reopened.note == f"diagnostic {diagnostic.pk} failed: Memory"
    assert not SchedulerAction.objects.filter(kind="resume").exists()
    assert Ticket.objects.filter(rule="diagnostic_failed", gpu_id=ticket.gpu_id, state="open").exists()
    # Fixed for real this time: resolved again, a new diagnostic, it passes, the node resumes.
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to_state="resolved", user=technician)
        for other in Ticket.objects.filter(rule="diagnostic_failed", state="open"):
            ticket_transition(ticket=other, to_state="resolved", user=technician)
    newest = Diagnostic.objects.exclude(pk=diagnostic.pk).order_by("-requested_at").first()
    post_result(django_capture_on_commit_callbacks, token, newest)
    assert "DRAIN" not in slurm.node_line()


def test_without_slurm_the_same_gate_reopens_the_ticket(settings, django_capture_on_commit_callbacks, technician,
                                                        monkeypatch):  # fmt: skip
    settings.SLURM_ENABLED = False
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    host, token = enrol("no-slurm-host")
    post_xid(django_capture_on_commit_callbacks, hostname=host.hostname, token=token, gpu_index=1)
    ticket = Ticket.objects.get(rule="xid_bus", host=host)
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to_state="resolved", user=technician)
    diagnostic = Diagnostic.objects.get(ticket=ticket)
    post_result(django_capture_on_commit_callbacks, token, diagnostic, result="fail")
    ticket.refresh_from_db()
    assert ticket.state == "open"
    assert not SchedulerAction.objects.exists()


def test_retiring_the_tickets_gpu_leaves_the_node_drained_until_an_admin_forces_it(
    slurm, django_capture_on_commit_callbacks, client_for, technician, admin
):
    """The ticket's gate then covers no GPU: nothing proves the node fit, so resolving the ticket
    (and a pass on the host's other GPUs) never resumes it; an admin's forced resume does."""
    capture = django_capture_on_commit_callbacks
    host, token = enrol(slurm.node)
    post_xid(capture, hostname=slurm.node, token=token, gpu_index=0)
    ticket = Ticket.objects.get(rule="xid_bus", host=host)
    assert node(slurm).state in ("drained", "draining")
    client = client_for(technician)
    retired = client.patch(f"/api/v1/gpus/{ticket.gpu.uuid}", json.dumps({"status": "retired"}),
                           content_type="application/json")  # fmt: skip
    assert retired.status_code == 200, retired.content
    with capture(execute=True):
        resolved = client.post(f"/api/v1/tickets/{ticket.pk}/state", json.dumps({"state": "resolved"}),
                               content_type="application/json")  # fmt: skip
    assert resolved.status_code == 200, resolved.content
    assert "DRAIN" in slurm.node_line()
    assert not SchedulerAction.objects.filter(kind="resume").exists()
    assert any("no GPU of this ticket is left to diagnose" in note for note in notes(ticket))
    others = list(host.gpus.exclude(pk=ticket.gpu_id))
    with capture(execute=True):
        diagnostic = diagnostic_request(host=host, level=1, gpus=others)
    post_result(capture, token, diagnostic)
    assert "DRAIN" in slurm.node_line()
    assert not SchedulerAction.objects.filter(kind="resume").exists()
    # Past the gate only by an admin's force, which says so.
    with capture(execute=True):
        forced = client_for(admin).post(
            f"/api/v1/hosts/{host.hostname}/scheduler/resume",
            json.dumps({"reason": "card pulled, node checked by hand", "force": True}), content_type="application/json",
        )  # fmt: skip
    assert forced.status_code == 200, forced.content
    assert "DRAIN" not in slurm.node_line()
    assert SchedulerAction.objects.get(kind="resume").forced
