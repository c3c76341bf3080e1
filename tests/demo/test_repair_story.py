"""The demo's verified repair: sim-desk-c GPU 0's XID ticket, a repair, a level-1 diagnostic that
fails, a second repair, one that passes, back in service through the gate; and its lemons."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from portal.demo import repair, story
from portal.demo.repair_history import repair_history_seed
from portal.diagnostics.models import Diagnostic, DiagnosticGpu
from portal.diagnostics.services import diagnostic_request
from portal.fleet.models import Gpu, GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from portal.maintenance.services.tickets import ticket_fire
from portal.scheduler.models import SchedulerAction

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", verbosity=0)
    assert repair_history_seed() is True
    story.prepare_simulated_hosts()
    story.backfill_history(span=dt.timedelta(minutes=10))
    gpu = Gpu.objects.select_related("host").get(host__hostname="sim-desk-c", index=0)
    # The burn-in its registration asks for after the commit (the simulated agent runs it in the demo).
    diagnostic_request(host=gpu.host, level=1, purpose=Diagnostic.Purpose.BURN_IN)
    return gpu


def _moments(gpu):
    """The story's steps of the GPU, in time order."""
    steps = [(r.performed_at, "repair") for r in MaintenanceRecord.objects.filter(gpu=gpu, kind="repair")]
    steps += [
        (row.diagnostic.finished_at, f"diagnostic {row.result}")
        for row in DiagnosticGpu.objects.filter(gpu=gpu, diagnostic__finished_at__isnull=False).select_related(
            "diagnostic"
        )
    ]
    steps += [(c.changed_at, c.to_status) for c in GpuStatusChange.objects.filter(gpu=gpu).exclude(from_status="")]
    steps += [(t.first_seen, f"ticket {t.rule}") for t in Ticket.objects.filter(gpu=gpu)]
    return [what for _, what in sorted(steps)]


def test_the_story_is_told_in_order_through_the_gate(demo, client_for, viewer):
    gpu = demo
    assert repair.repair_story_seed() is True
    gpu.refresh_from_db()
    assert _moments(gpu) == [
        "ticket xid_bus", "out_for_repair", "repair", "diagnostic fail", "ticket diagnostic_failed", "repair",
        "diagnostic pass", "in_service",
    ]  # fmt: skip
    assert gpu.status == Gpu.Status.IN_SERVICE
    back = GpuStatusChange.objects.filter(gpu=gpu).latest("changed_at")
    assert back.to_status == Gpu.Status.IN_SERVICE and not back.override
    # Asked for by the technician with each repair (the gate found them under way), with their tests.
    burn_in = Diagnostic.objects.get(purpose=Diagnostic.Purpose.BURN_IN)
    assert burn_in.state == Diagnostic.State.REQUESTED  # left to the agent
    failed, passed = Diagnostic.objects.filter(host=gpu.host).exclude(pk=burn_in.pk).order_by("requested_at")
    assert (failed.state, passed.state) == ("failed", "passed")
    assert {failed.purpose, passed.purpose} == {Diagnostic.Purpose.RETURN}
    assert failed.requested_by.username == passed.requested_by.username == "tech"
    xid = Ticket.objects.get(gpu=gpu, rule="xid_bus")
    assert failed.gpus.get().tests.get(name="XID errors").result == "fail"
    assert passed.gpus.get().tests.get(name="XID errors").result == "pass"
    # The XID ticket: resolved by the first repair, reopened by the failed diagnostic, resolved again.
    notes = " | ".join(event.note for event in xid.events.all())
    assert f"diagnostic {failed.pk} failed: XID errors" in notes
    assert xid.state == Ticket.State.RESOLVED
    assert not Ticket.objects.filter(gpu=gpu, state__in=Ticket.OPEN_STATES).exists()
    assert all(event.at < timezone.now() - dt.timedelta(days=1) for event in xid.events.all())
    # Nothing left for the simulated agent to run, no Slurm action from the past.
    assert (
        not Diagnostic.objects.filter(host=gpu.host, state__in=Diagnostic.OPEN_STATES).exclude(pk=burn_in.pk).exists()
    )
    assert not SchedulerAction.objects.filter(host=gpu.host).exists()
    # Shown where a newcomer looks: the GPU page, the ticket, the RMA pack.
    page = client_for(viewer).get(f"/gpus/{gpu.uuid}/").content.decode()
    assert "diag-row-failed" in page and "diag-row-passed" in page and repair.RMA_NUMBER in page
    assert "1 XID error(s) since" in page and "no XID error since" in page
    pack = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.json").json()
    assert [r["rma_number"] for r in pack["repairs"]] == ["", repair.RMA_NUMBER]
    assert [x["code"] for x in pack["xid_timeline"]] == [79, 79]  # the fault, and the one in the failed diagnostic
    ticket_page = client_for(viewer).get(f"/tickets/{xid.pk}/").content.decode()
    assert "failed: XID errors" in ticket_page

    assert repair.repair_story_seed() is False  # once
    assert MaintenanceRecord.objects.filter(gpu=gpu, kind="repair").count() == 2


def test_the_demo_lemons_are_in_the_reliability_report(demo, client_for, viewer):
    gpu = demo
    repair.repair_story_seed()
    # The live XID 79 the simulated agent sends ~20 s into the demo: a failure after the repair.
    now = timezone.now()
    ticket, change = ticket_fire(rule="xid_bus", host_id=gpu.host_id, gpu_id=gpu.pk, at=now, value=79.0,
                                 evidence=[[now.timestamp(), 79]])  # fmt: skip
    assert change == "opened" and ticket.state == Ticket.State.OPEN  # a new ticket, not the story's reopened
    period = {"from": (now - dt.timedelta(days=365)).isoformat(), "to": (now + dt.timedelta(hours=1)).isoformat()}
    body = client_for(viewer).get("/api/v1/reports/reliability", period).json()
    lemons = {(g["hostname"], g["index"]): g for g in body["lemons"]["gpus"]}
    assert ("dgx-02", 2) in lemons
    assert ("sim-desk-c", 0) in lemons
    assert "of the repair of" in " ".join(lemons[("sim-desk-c", 0)]["reasons"])
