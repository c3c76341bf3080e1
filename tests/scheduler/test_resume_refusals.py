"""A person's drain is never undone by the portal, and a resume by hand waits for what keeps the
node drained (an open draining ticket, a rest not over, a reason the portal did not set) unless
an admin forces it. Against the session's real single-node Slurm cluster (cli mode)."""

import datetime as dt
import json

import pytest
from auditlog.models import LogEntry
from django.utils import timezone

from portal.diagnostics.services import diagnostic_request, diagnostic_result_record
from portal.maintenance.models import TicketEvent
from portal.maintenance.services import ticket_transition
from portal.maintenance.services.tickets import ticket_fire
from portal.scheduler.enqueue import host_actions_enqueue
from portal.scheduler.models import SchedulerAction
from portal.scheduler.services import scheduler_rest_request, scheduler_sweep
from tests.factories import GpuFactory
from tests.scheduler.helpers import enrol, node

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(settings, cluster):
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "cli"
    settings.SLURM_BIN_DIR = ""
    settings.SLURM_DRAIN_SEVERITY = "critical"
    return cluster


@pytest.fixture
def host(slurm):
    return enrol(slurm.node)[0]


def person_drains(cluster, reason: str = "rack 4 power work") -> None:
    """Someone drains the node with scontrol, outside the portal."""
    cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=DRAIN", f"Reason={reason}")


def critical_ticket(capture, host):
    with capture(execute=True):
        ticket, _ = ticket_fire(rule="xid_bus", host_id=host.pk, gpu_id=None, at=timezone.now(), severity="critical")
    return ticket


def gate_passed(capture, host):
    """The host's GPU passed a diagnostic since its ticket opened: resolving the ticket lets the node
    go (a gate over no GPU never passes)."""
    gpus = list(host.gpus.all()) or [GpuFactory(host=host, index=0)]
    with capture(execute=True):
        diagnostic = diagnostic_request(host=host, level=1, gpus=gpus)
        now = timezone.now()
        results = [{"uuid": gpu.uuid, "result": "pass", "tests": []} for gpu in gpus]
        diagnostic_result_record(
            diagnostic_id=diagnostic.pk, host=host, started_at=now, finished_at=now, tool="nvml", tool_version="",
            driver_version=host.driver_version, gpus=results,
        )  # fmt: skip


def rest(capture, host, user, hours: int = 2):
    ticket, _ = ticket_fire(rule="no_rest", host_id=host.pk, gpu_id=None, at=timezone.now())
    with capture(execute=True):
        actions = scheduler_rest_request(ticket=ticket, hours=hours, user=user)
        host_actions_enqueue(host.pk)
    return ticket, actions


def resume(client, hostname: str, body=None):
    data = json.dumps(body) if body is not None else ""
    return client.post(f"/api/v1/hosts/{hostname}/scheduler/resume", data, content_type="application/json")


def notes(ticket) -> list[str]:
    return list(ticket.events.filter(kind=TicketEvent.Kind.SCHEDULER).order_by("id").values_list("note", flat=True))


def is_drained(cluster) -> bool:
    return "drain" in node(cluster).state


# The "give the GPUs rest" drain and its scheduled resume


def test_rest_on_a_node_a_person_drained_is_refused_and_changes_nothing(
    slurm, host, client_for, technician, django_capture_on_commit_callbacks
):
    person_drains(slurm)
    ticket, _ = ticket_fire(rule="no_rest", host_id=host.pk, gpu_id=None, at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        page = client_for(technician).post(f"/scheduler/tickets/{ticket.pk}/rest", {"hours": "2"}, follow=True)
    text = page.content.decode()
    assert f"No rest asked: Slurm node {slurm.node} is drained for another reason" in text
    assert "a person drained it (rack 4 power work)" in text
    assert not SchedulerAction.objects.exists()
    assert node(slurm).reason == "rack 4 power work"


def test_rest_drain_skips_a_node_a_person_drained_meanwhile_and_never_resumes_it(
    slurm, host, technician, django_capture_on_commit_callbacks
):
    """The person drains between the request and the worker: the drain is skipped, not overwritten,
    and the rest's own resume is dropped, so the person's drain outlives the rest."""
    ticket, _ = ticket_fire(rule="no_rest", host_id=host.pk, gpu_id=None, at=timezone.now())
    drain, later = scheduler_rest_request(ticket=ticket, hours=2, user=technician)  # queued, not run yet
    person_drains(slurm)
    with django_capture_on_commit_callbacks(execute=True):
        host_actions_enqueue(host.pk)

    assert node(slurm).reason == "rack 4 power work"  # not "gpu-fleet #…: rest for 2 h"
    drain.refresh_from_db()
    later.refresh_from_db()
    assert drain.state == later.state == "skipped"
    assert "drained for another reason (rack 4 power work): no rest" in drain.outcome
    assert f"no rest: a person drained Slurm node {slurm.node} (rack 4 power work)" in notes(ticket)

    # Even were the resume still due (an old row, a race), it would not lift the person's drain.
    SchedulerAction.objects.filter(pk=later.pk).update(state="pending", not_before=timezone.now())
    scheduler_sweep()
    assert (node(slurm).state, node(slurm).reason) == ("drained", "rack 4 power work")


def test_a_ticket_resolved_during_a_rest_leaves_the_node_drained_until_the_rest_is_over(
    slurm, host, admin, technician, django_capture_on_commit_callbacks
):
    no_rest, (_, rest_resume) = rest(django_capture_on_commit_callbacks, host, technician, hours=3)
    assert node(slurm).reason.startswith(f"gpu-fleet #{no_rest.pk}: rest for 3 h")
    xid = critical_ticket(django_capture_on_commit_callbacks, host)
    assert "already drained" in notes(xid)[-1]
    gate_passed(django_capture_on_commit_callbacks, host)

    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=xid, to_state="resolved", user=admin)
    assert is_drained(slurm)
    assert f"stays drained: the rest asked on ticket #{no_rest.pk} lasts until" in notes(xid)[-1]

    SchedulerAction.objects.filter(pk=rest_resume.pk).update(not_before=timezone.now() - dt.timedelta(seconds=1))
    scheduler_sweep()
    assert not is_drained(slurm)
    assert notes(no_rest)[-1] == f"Slurm node {slurm.node} resumed: the rest is over"


def test_rest_on_a_node_a_ticket_drained_keeps_the_tickets_reason(
    slurm, host, admin, technician, django_capture_on_commit_callbacks
):
    xid = critical_ticket(django_capture_on_commit_callbacks, host)
    no_rest, (drain, rest_resume) = rest(django_capture_on_commit_callbacks, host, technician)
    drain.refresh_from_db()
    assert drain.state == "skipped" and "stays drained for the rest too" in drain.outcome
    assert node(slurm).reason.startswith(f"gpu-fleet #{xid.pk}:")
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=xid, to_state="resolved", user=admin)
    assert is_drained(slurm)  # the rest is not over
    gate_passed(django_capture_on_commit_callbacks, host)  # the resolved ticket's diagnostic
    assert is_drained(slurm)  # still not over
    SchedulerAction.objects.filter(pk=rest_resume.pk).update(not_before=timezone.now() - dt.timedelta(seconds=1))
    scheduler_sweep()
    assert not is_drained(slurm)


# A resume by hand


def test_resume_by_hand_is_refused_while_a_draining_ticket_is_open(
    slurm, host, client_for, technician, admin, django_capture_on_commit_callbacks
):
    ticket = critical_ticket(django_capture_on_commit_callbacks, host)
    assert is_drained(slurm)
    before_id = SchedulerAction.objects.order_by("-id").values_list("id", flat=True).first()
    for user in (technician, admin):
        answer = resume(client_for(user), host.hostname, {"reason": "looks fine to me"})
        assert answer.status_code == 409, answer.content
        assert answer.json()["detail"] == [{"loc": "ticket", "msg": f"ticket #{ticket.pk} is open"}]
        assert "an admin may force the resume" in answer.json()["error"]
    assert resume(client_for(technician), host.hostname).status_code == 409  # no body at all
    assert is_drained(slurm)
    # Nothing carried out; each refusal stays in the audit trail, with who asked and why it was refused.
    refused = list(SchedulerAction.objects.filter(pk__gt=before_id).order_by("id"))
    assert [(a.kind, a.state, a.requested_by) for a in refused] == [
        ("resume", "skipped", technician), ("resume", "skipped", admin), ("resume", "skipped", technician)
    ]  # fmt: skip
    assert refused[0].outcome == (
        f"resume by hand refused: Slurm node {slurm.node} stays drained: ticket #{ticket.pk} is open"
    )
    for action in refused:
        entry = LogEntry.objects.get_for_object(action).filter(action=LogEntry.Action.CREATE).get()
        assert entry.actor == action.requested_by

    gate_passed(django_capture_on_commit_callbacks, host)
    with django_capture_on_commit_callbacks(execute=True):
        ticket_transition(ticket=ticket, to_state="resolved", user=admin)
    assert not is_drained(slurm)


def test_resume_by_hand_is_refused_while_a_person_drained_the_node(slurm, host, client_for, technician):
    person_drains(slurm, "rack 4 power work; back Monday")
    answer = resume(client_for(technician), host.hostname, {})
    assert answer.status_code == 409
    assert answer.json()["detail"] == [
        {"loc": "node.reason", "msg": "a person drained it (rack 4 power work; back Monday)"}
    ]
    assert node(slurm).reason == "rack 4 power work; back Monday"


def test_resume_by_hand_is_refused_during_a_rest(
    slurm, host, client_for, technician, django_capture_on_commit_callbacks
):
    no_rest, _ = rest(django_capture_on_commit_callbacks, host, technician)
    answer = resume(client_for(technician), host.hostname, {})
    assert answer.status_code == 409
    [detail] = answer.json()["detail"]
    assert detail["loc"] == "rest" and detail["msg"].startswith(f"the rest asked on ticket #{no_rest.pk} lasts until")
    assert is_drained(slurm)


def test_a_drain_by_hand_through_the_portal_is_the_persons_to_end(slurm, host, client_for, technician):
    client = client_for(technician)
    url = f"/api/v1/hosts/{host.hostname}/scheduler/drain"
    assert client.post(url, {"reason": "PDU swap"}, content_type="application/json").status_code == 200
    assert resume(client, host.hostname, {}).status_code == 200
    assert not is_drained(slurm)
    # The same words typed into scontrol later are a person's drain all the same once the portal's
    # own drain was ended.
    person_drains(slurm, "someone else's window")
    assert resume(client, host.hostname, {}).status_code == 409


def test_a_drain_by_hand_never_takes_over_someone_elses_drain(slurm, host, client_for, technician):
    """Else draining over it and then resuming would end the other person's drain in two clicks."""
    person_drains(slurm)
    client = client_for(technician)
    url = f"/api/v1/hosts/{host.hostname}/scheduler/drain"
    answer = client.post(url, {"reason": "my window"}, content_type="application/json")
    assert answer.status_code == 409
    assert answer.json()["detail"] == [{"loc": "node.reason", "msg": "a person drained it (rack 4 power work)"}]
    assert node(slurm).reason == "rack 4 power work" and not SchedulerAction.objects.exists()
    page = client.post(f"/scheduler/hosts/{host.hostname}/drain", {"reason": "my window"}, follow=True)
    assert f"Slurm node {slurm.node} is already drained for another reason, which stays" in page.content.decode()
    assert resume(client, host.hostname, {}).status_code == 409
    assert node(slurm).reason == "rack 4 power work"


def test_force_is_for_admins_with_a_reason_and_is_recorded(
    slurm, host, client_for, technician, admin, django_capture_on_commit_callbacks
):
    ticket = critical_ticket(django_capture_on_commit_callbacks, host)
    refused = resume(client_for(technician), host.hostname, {"force": True, "reason": "urgent deadline"})
    assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == "force"
    no_reason = resume(client_for(admin), host.hostname, {"force": True, "reason": "  "})
    assert no_reason.status_code == 400 and no_reason.json()["detail"][0]["loc"] == "reason"
    bad = resume(client_for(admin), host.hostname, {"force": "yes please", "reason": "x"})
    assert bad.status_code == 400 and bad.json()["detail"][0]["loc"] == "force"
    assert is_drained(slurm)
    # The technician's attempt to force stays in the audit trail; the bad requests wrote nothing.
    (attempt,) = SchedulerAction.objects.filter(source="person")
    assert (attempt.state, attempt.forced, attempt.requested_by) == ("skipped", False, technician)
    assert attempt.outcome == f"forced resume refused: only admins may force a resume of Slurm node {slurm.node}"
    assert LogEntry.objects.get_for_object(attempt).get().actor == technician

    answer = resume(client_for(admin), host.hostname, {"force": True, "reason": "GPU 0 tested fine by hand"})
    assert answer.status_code == 200, answer.content
    assert "drain" not in answer.json()["state"]
    action = SchedulerAction.objects.get(source="person", kind="resume", forced=True)
    assert action.forced and action.requested_by == admin and action.state == "done"
    assert action.outcome == (
        f"Slurm node {slurm.node} resumed by hand, forced past: ticket #{ticket.pk} is open: GPU 0 tested fine by hand"
    )
    entry = LogEntry.objects.get_for_object(action).filter(action=LogEntry.Action.CREATE).get()
    assert entry.actor == admin and entry.changes_dict["forced"][1] == "True"
    assert (
        f"Slurm node {slurm.node} resumed by hand, forced although this ticket is open: GPU 0 tested fine by hand"
        in notes(ticket)
    )
    # The node works again: the page offers no refusal, and no second forced resume, for it.
    page = client_for(admin).get(host.get_absolute_url()).content.decode()
    assert "The portal keeps this node drained" not in page and "Resume anyway (forced)" not in page


def test_forced_resume_past_a_persons_drain_and_a_rest_ends_the_rest(
    slurm, host, client_for, admin, technician, django_capture_on_commit_callbacks
):
    no_rest, (_, rest_resume) = rest(django_capture_on_commit_callbacks, host, technician)
    person_drains(slurm)
    answer = resume(client_for(admin), host.hostname, {"force": True, "reason": "power work was cancelled"})
    assert answer.status_code == 200, answer.content
    rest_resume.refresh_from_db()
    assert rest_resume.state == "skipped" and "resumed by hand before the rest was over" in rest_resume.outcome
    outcome = SchedulerAction.objects.get(source="person").outcome
    assert "a person drained it (rack 4 power work)" in outcome and f"ticket #{no_rest.pk} lasts until" in outcome


# The host page


def test_host_page_says_why_it_cannot_resume(slurm, host, client_for, technician, admin):
    person_drains(slurm, "rack <4> power work")
    page = client_for(technician).get(host.get_absolute_url()).content.decode()
    assert "The portal keeps this node drained, so it cannot be resumed by hand now:" in page
    assert "a person drained it (rack &lt;4&gt; power work)" in page
    assert "Only an admin may resume it now" in page
    assert f'action="/scheduler/hosts/{host.hostname}/resume"' not in page  # no button that would fail
    answer = client_for(technician).post(f"/scheduler/hosts/{host.hostname}/resume", {}, follow=True)
    assert f"Slurm node {slurm.node} stays drained: a person drained it (rack &lt;4&gt; power work)." in (
        answer.content.decode()
    )
    forced = client_for(technician).post(f"/scheduler/hosts/{host.hostname}/resume", {"force": "1", "reason": "x"})
    assert forced.status_code == 403 and is_drained(slurm)

    page = client_for(admin).get(host.get_absolute_url()).content.decode()
    assert "Resume anyway (forced)" in page and 'name="force" value="1"' in page
    answer = client_for(admin).post(
        f"/scheduler/hosts/{host.hostname}/resume", {"force": "1", "reason": "power work done"}, follow=True
    )
    assert "resumed by hand, forced past: a person drained it" in answer.content.decode()
    assert not is_drained(slurm)


def test_openapi_documents_the_refusal(client_for, viewer):
    schema = client_for(viewer).get("/api/v1/openapi.json").json()
    operation = schema["paths"]["/api/v1/hosts/{hostname}/scheduler/resume"]["post"]
    assert {"200", "400", "403", "404", "409", "503"} <= set(operation["responses"])
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert "force" in json.dumps(schema["components"]["schemas"]) and body


def test_what_slurm_says_decides_without_a_cluster(db):
    """The reason rule on Slurm's own answers: a down node's reason is Slurm's, a drain without a
    reason is a person's, the portal's own prefix is the portal's."""
    from portal.fleet.models import Host
    from portal.scheduler.adapters import Node
    from portal.scheduler.services import scheduler_resume_blockers

    host = Host.objects.create(hostname="gpu01")

    def why(state, reason, by_hand=True):
        found = scheduler_resume_blockers(host_id=host.pk, node=Node("gpu01", state, reason), by_hand=by_hand)
        return [(b.loc, b.msg) for b in found]

    assert why("down", "Not responding") == [
        ("node.reason", "Slurm holds it for a reason the portal did not set (Not responding)")
    ]
    assert why("drained", "") == [("node.reason", "a person drained it (no reason)")]
    assert why("draining", "gpu-fleet #3: XID 79") == [] and why("idle", "") == []
    SchedulerAction.objects.create(
        host=host, node="gpu01", kind="drain", source="person", state="done", reason="PDU", done_at=timezone.now()
    )
    assert why("drained", "PDU") == []  # the portal's drain by hand, ended by hand
    assert why("drained", "PDU", by_hand=False) == [("node.reason", "a person drained it (PDU)")]  # never by itself


# A resolved ticket whose diagnostic has not passed yet


def drained_and_resolved(cluster, capture, user, monkeypatch):
    """An XID drains the node through ingest; a person resolves the ticket: the diagnostic it asks
    for has not run yet."""
    from portal.maintenance.models import Ticket
    from portal.telemetry import ingest_view
    from tests.scheduler.helpers import post_xid

    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    host, token = enrol(cluster.node)
    post_xid(capture, hostname=cluster.node, token=token, gpu_index=0)
    ticket = Ticket.objects.get(rule="xid_bus", host=host)
    with capture(execute=True):
        ticket_transition(ticket=ticket, to_state="resolved", user=user, note="reseated")
    assert is_drained(cluster)
    return host, token, ticket


def test_resume_by_hand_is_refused_while_a_resolved_tickets_diagnostic_is_pending(
    slurm, client_for, technician, admin, django_capture_on_commit_callbacks, monkeypatch
):
    capture = django_capture_on_commit_callbacks
    host, token, ticket = drained_and_resolved(slurm, capture, technician, monkeypatch)
    gate = [{"loc": "diagnostic", "msg": f"ticket #{ticket.pk} is resolved but no diagnostic has passed on its GPUs "
                                         "since it opened"}]  # fmt: skip
    for user in (technician, admin):
        answer = resume(client_for(user), host.hostname, {"reason": "reseated, looks fine"})
        assert answer.status_code == 409, answer.content
        assert answer.json()["detail"] == gate
    assert is_drained(slurm) and node(slurm).reason.startswith(f"gpu-fleet #{ticket.pk}:")
    assert "DRAIN" in slurm.node_line()
    refused = SchedulerAction.objects.filter(source="person", kind="resume").order_by("id")
    assert [(a.state, a.requested_by) for a in refused] == [("skipped", technician), ("skipped", admin)]
    assert all(f"ticket #{ticket.pk} is resolved but no diagnostic has passed" in a.outcome for a in refused)
    assert all(LogEntry.objects.get_for_object(a).get().actor == a.requested_by for a in refused)
    page = client_for(technician).get(host.get_absolute_url()).content.decode()
    assert f"ticket #{ticket.pk} is resolved but no diagnostic has passed on its GPUs since it opened" in page

    # An admin may force it, as for an open ticket; the ticket's history says so.
    answer = resume(client_for(admin), host.hostname, {"force": True, "reason": "tested by hand"})
    assert answer.status_code == 200, answer.content
    assert not is_drained(slurm)
    forced = SchedulerAction.objects.get(source="person", forced=True)
    assert forced.state == "done" and f"forced past: ticket #{ticket.pk} is resolved but no diagnostic" in (
        forced.outcome
    )
    assert notes(ticket)[-1] == (
        f"Slurm node {slurm.node} resumed by hand, forced before a diagnostic passed on this ticket's GPUs: "
        "tested by hand"
    )


def test_the_blocker_ends_when_the_diagnostic_passes(
    slurm, client_for, technician, django_capture_on_commit_callbacks, monkeypatch
):
    from tests.scheduler.helpers import diagnostics_pass

    capture = django_capture_on_commit_callbacks
    host, token, ticket = drained_and_resolved(slurm, capture, technician, monkeypatch)
    client = client_for(technician)
    drain = client.post(f"/api/v1/hosts/{host.hostname}/scheduler/drain", {"reason": "PDU swap"},
                        content_type="application/json")  # fmt: skip
    assert drain.status_code == 200 and resume(client, host.hostname, {}).status_code == 409
    assert diagnostics_pass(capture, host=host, token=token) == 1
    assert node(slurm).reason == "PDU swap"  # the person's drain by hand is theirs to end
    answer = resume(client_for(technician), host.hostname, {})
    assert answer.status_code == 200, answer.content  # the ticket's own gate no longer holds it
    assert not is_drained(slurm)


def test_a_rest_that_ends_leaves_a_node_drained_for_a_pending_diagnostic(
    slurm, host, technician, admin, django_capture_on_commit_callbacks
):
    """The rest drained the node; a critical ticket came and was resolved meanwhile, its diagnostic
    still to pass: the rest's end keeps the node drained, the passing diagnostic resumes it."""
    from portal.diagnostics.models import Diagnostic
    from tests.factories import GpuFactory

    capture = django_capture_on_commit_callbacks
    gpu = GpuFactory(host=host, index=0)
    no_rest, (_, rest_resume) = rest(capture, host, technician, hours=2)
    with capture(execute=True):
        xid, _ = ticket_fire(rule="xid_bus", host_id=host.pk, gpu_id=gpu.pk, at=timezone.now(), severity="critical")
    with capture(execute=True):
        ticket_transition(ticket=xid, to_state="resolved", user=admin)
    diagnostic = Diagnostic.objects.get(ticket=xid)

    SchedulerAction.objects.filter(pk=rest_resume.pk).update(not_before=timezone.now() - dt.timedelta(seconds=1))
    scheduler_sweep()
    assert is_drained(slurm) and "DRAIN" in slurm.node_line()
    rest_resume.refresh_from_db()
    assert rest_resume.state == "skipped"
    assert rest_resume.outcome == (
        f"Slurm node {slurm.node} stays drained: ticket #{xid.pk} is resolved but no diagnostic has passed on its "
        "GPUs since it opened"
    )

    from portal.diagnostics.services import diagnostic_result_record

    now = timezone.now()
    with capture(execute=True):
        diagnostic_result_record(
            diagnostic_id=diagnostic.pk, host=host, started_at=now, finished_at=now, tool="nvml", tool_version="",
            driver_version="", gpus=[{"uuid": gpu.uuid, "result": "pass", "tests": []}],
        )  # fmt: skip
    assert not is_drained(slurm)
