"""Tickets drain and resume a real Slurm node (the session's single-node cluster, cli mode)."""

import datetime as dt

import pytest
from auditlog.models import LogEntry
from django.utils import timezone, translation

from portal.core.messages import shown
from portal.maintenance.models import Ticket, TicketEvent
from portal.maintenance.services import ticket_transition
from portal.maintenance.services.tickets import ticket_fire
from portal.scheduler.enqueue import host_actions_enqueue
from portal.scheduler.models import SchedulerAction
from portal.scheduler.services import scheduler_rest_request, scheduler_sweep
from portal.telemetry import ingest_view
from tests.scheduler.helpers import diagnostics_pass, enrol, node, post_xid, repair_return_passed, slurm_never_answers

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(settings, cluster, monkeypatch):
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "cli"
    settings.SLURM_BIN_DIR = ""
    settings.SLURM_DRAIN_SEVERITY = "critical"
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    return cluster


def base_state(cluster) -> str:
    return node(cluster).state.split("+")[0]


def history(ticket) -> list[str]:
    return list(ticket.events.filter(kind=TicketEvent.Kind.SCHEDULER).order_by("id").values_list("note", flat=True))


def test_xid_79_drains_the_node_and_a_passed_repair_return_resumes_it(
    slurm, django_capture_on_commit_callbacks, technician, client_for
):
    host, token = enrol(slurm.node)
    job = slurm.sbatch("--gres=gpu:1", "-J", "train-llm", "--wrap", "sleep 600")
    slurm.wait_running(job)

    post_xid(django_capture_on_commit_callbacks, hostname=slurm.node, token=token, gpu_index=0)

    ticket = Ticket.objects.get(rule="xid_bus", host=host)
    assert ticket.severity == "critical" and ticket.gpu.index == 0
    state = node(slurm)
    assert state.state == "draining"  # the job keeps running: drain, not down
    assert state.reason == f"gpu-fleet #{ticket.pk}: {ticket.title}"
    assert f"Reason=gpu-fleet #{ticket.pk}: {ticket.title}" in slurm.node_line()
    assert slurm.run("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING"
    notes = history(ticket)
    assert f"running on GPU 0 when this ticket opened: job {job} (train-llm, user root)" in notes
    assert f"Slurm node {slurm.node} drained: gpu-fleet #{ticket.pk}: {ticket.title}" in notes
    drain = SchedulerAction.objects.get(kind="drain", ticket=ticket)
    assert drain.state == "done" and drain.attempts == 1
    assert LogEntry.objects.get_for_object(drain).filter(action=LogEntry.Action.CREATE).exists()
    page = client_for(technician).get(ticket.get_absolute_url()).content.decode()
    assert f"job {job} (train-llm, user root)" in page and "Scheduler (Slurm)" in page

    repair_return_passed(django_capture_on_commit_callbacks, host=host, gpu_index=0, user=technician)

    ticket.refresh_from_db()
    assert ticket.state == "resolved"
    # Resumed once the diagnostic the run requested passes (tests/scheduler/test_diagnostic_gate.py).
    assert "DRAIN" in slurm.node_line()
    assert diagnostics_pass(django_capture_on_commit_callbacks, host=host, token=token) == 1
    # Resumed, the job still runs (Slurm marks a resumed node not_responding until its next ping).
    assert base_state(slurm) == "mixed"
    assert "DRAIN" not in slurm.node_line()
    assert history(ticket)[-1] == f"Slurm node {slurm.node} resumed: no draining ticket is open"


def test_the_node_stays_drained_while_another_draining_ticket_is_open(slurm, django_capture_on_commit_callbacks, admin):
    host, token = enrol(slurm.node)
    post_xid(django_capture_on_commit_callbacks, hostname=slurm.node, token=token, gpu_index=0)
    post_xid(django_capture_on_commit_callbacks, hostname=slurm.node, token=token, gpu_index=1)
    first, second = Ticket.objects.filter(rule="xid_bus").order_by("id")
    assert node(slurm).reason.startswith(f"gpu-fleet #{first.pk}:")
    assert "already drained" in history(second)[-1]

    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=first, to_state="resolved", user=admin)
    diagnostics_pass(django_capture_on_commit_callbacks, host=host, token=token)
    assert base_state(slurm) == "drained"
    assert history(first)[-1] == f"Slurm node {slurm.node} stays drained: ticket #{second.pk} is open"
    # The same note and the action's outcome in a reader's language, the blocker inside it too.
    note = first.events.filter(kind=TicketEvent.Kind.SCHEDULER).order_by("id").last()
    action = SchedulerAction.objects.filter(ticket=first).order_by("id").last()
    assert action.outcome == note.note
    with translation.override("zh-hans"):
        assert shown(note.note_msg, note.note) == f"Slurm 节点 {slurm.node} 保持排空：工单 #{second.pk} 仍未关闭"
        assert action.outcome_shown() == shown(note.note_msg, note.note)

    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=second, to_state="resolved", user=admin)
    assert base_state(slurm) == "drained"  # until GPU 1's own diagnostic passes
    diagnostics_pass(django_capture_on_commit_callbacks, host=host, token=token)
    assert base_state(slurm) == "idle"


def test_a_persons_own_drain_is_never_resumed(slurm, django_capture_on_commit_callbacks, admin):
    host, token = enrol(slurm.node)
    post_xid(django_capture_on_commit_callbacks, hostname=slurm.node, token=token)
    ticket = Ticket.objects.get(rule="xid_bus")
    assert base_state(slurm) == "drained"
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=rack 4 power work")

    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to_state="resolved", user=admin)
    diagnostics_pass(django_capture_on_commit_callbacks, host=host, token=token)

    state = node(slurm)
    assert (state.state.split("+")[0], state.reason) == ("drained", "rack 4 power work")
    assert "a person drained it (rack 4 power work)" in history(ticket)[-1]
    assert SchedulerAction.objects.get(kind="resume").state == "skipped"


def test_severity_below_the_setting_does_not_drain(slurm, django_capture_on_commit_callbacks, settings):
    settings.SLURM_DRAIN_SEVERITY = "none"
    host, token = enrol(slurm.node)
    post_xid(django_capture_on_commit_callbacks, hostname=slurm.node, token=token)
    assert Ticket.objects.filter(rule="xid_bus").exists()
    assert base_state(slurm) == "idle"
    assert not SchedulerAction.objects.filter(kind="drain").exists()


def test_slurm_slow_never_fails_ingest_and_the_sweep_drains_once_it_answers(
    slurm, django_capture_on_commit_callbacks, settings, tmp_path, client_for, viewer
):
    usual_timeout = slurm_never_answers(settings, tmp_path)
    host, token = enrol(slurm.node)

    post_xid(django_capture_on_commit_callbacks, hostname=slurm.node, token=token)  # 202 all the same

    ticket = Ticket.objects.get(rule="xid_bus")
    drain = SchedulerAction.objects.get(kind="drain")
    assert drain.state == "pending" and drain.attempts == 1
    assert "did not answer within 0.3 s" in drain.last_error
    assert base_state(slurm) == "idle"
    page = client_for(viewer).get(host.get_absolute_url())
    assert page.status_code == 200
    text = page.content.decode()
    assert "Last failed action: drain" in text and "did not answer within 0.3 s" in text

    # Slurm answers again: the beat sweep finishes the job. The real commands get the usual time
    # (0.3 s was for the stand-ins above; a loaded machine's sinfo can take longer).
    settings.SLURM_BIN_DIR = ""
    settings.SLURM_TIMEOUT = usual_timeout
    assert scheduler_sweep() >= 1
    drain.refresh_from_db()
    assert drain.state == "done" and drain.attempts == 2
    assert node(slurm).reason == f"gpu-fleet #{ticket.pk}: {ticket.title}"


def test_give_the_gpus_rest_drains_and_resumes_by_itself(slurm, django_capture_on_commit_callbacks, technician):
    host, _ = enrol(slurm.node)
    at = timezone.now()
    ticket, _ = ticket_fire(rule="no_rest", host_id=host.pk, gpu_id=None, at=at)
    with django_capture_on_commit_callbacks(execute=True):
        drain, resume = scheduler_rest_request(ticket=ticket, hours=2, user=technician)
        host_actions_enqueue(host.pk)
    assert base_state(slurm) == "drained"
    assert node(slurm).reason.startswith(f"gpu-fleet #{ticket.pk}: rest for 2 h")
    resume.refresh_from_db()
    assert resume.state == "pending" and resume.not_before > at + dt.timedelta(hours=1, minutes=59)

    scheduler_sweep()
    assert base_state(slurm) == "drained"  # not yet due

    SchedulerAction.objects.filter(pk=resume.pk).update(not_before=timezone.now() - dt.timedelta(seconds=1))
    scheduler_sweep()
    assert base_state(slurm) == "idle"
    assert history(ticket)[-1] == f"Slurm node {slurm.node} resumed: the rest is over"


def test_no_rest_ticket_page_offers_rest_and_checks_the_hours(
    slurm, client_for, technician, viewer, django_capture_on_commit_callbacks
):
    host, _ = enrol(slurm.node)
    ticket, _ = ticket_fire(rule="no_rest", host_id=host.pk, gpu_id=None, at=timezone.now())
    page = client_for(technician).get(ticket.get_absolute_url()).content.decode()
    assert "Drain after the current jobs" in page and f"/scheduler/tickets/{ticket.pk}/rest" in page
    assert "Drain after the current jobs" not in client_for(viewer).get(ticket.get_absolute_url()).content.decode()
    assert client_for(viewer).post(f"/scheduler/tickets/{ticket.pk}/rest", {"hours": "2"}).status_code == 403

    for hours in ("", "0", "abc", "1000"):
        answer = client_for(technician).post(f"/scheduler/tickets/{ticket.pk}/rest", {"hours": hours}, follow=True)
        assert "hours: a whole number of hours, 1 to 168" in answer.content.decode()
    assert not SchedulerAction.objects.exists() and base_state(slurm) == "idle"

    with django_capture_on_commit_callbacks(execute=True):
        answer = client_for(technician).post(f"/scheduler/tickets/{ticket.pk}/rest", {"hours": "3"}, follow=True)
    assert "resumes in 3 h" in answer.content.decode()
    assert base_state(slurm) == "drained"
    other, _ = ticket_fire(rule="xid_bus", host_id=host.pk, gpu_id=None, at=timezone.now())
    assert "Drain after the current jobs" not in client_for(technician).get(other.get_absolute_url()).content.decode()
