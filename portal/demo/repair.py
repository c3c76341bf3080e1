"""The demo's verified repair: sim-desk-c GPU 0's last fall off the bus, three days ago, told by
the same services a real fleet uses, with the records dated when each step happened.

XID 79 and its ticket; the GPU out for repair; a first repair (card re-seated) resolves the
ticket, so the return gate asks for a level-1 diagnostic; it FAILS (an XID during the run),
which opens a "Diagnostic failed" ticket and reopens the XID ticket; a second repair (riser
replaced, under an RMA) resolves both, the gate asks again and that diagnostic PASSES; the GPU
goes back in service through the return-to-service guard (not forced). The diagnostics' results
are stored as the agent posts them (diagnostic_result_record), so the simulated agent has nothing
left to run. The live XID 79 about 20 s into the demo is then a failure after a repair: the
reliability report lists the GPU as a lemon. Idempotent: nothing happens once the GPU has a repair.
"""

from __future__ import annotations

import datetime as dt

from auditlog.context import set_actor
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.diagnostics import services as diagnostics
from portal.diagnostics.models import Diagnostic
from portal.fleet import services as fleet
from portal.fleet.models import Gpu, GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket, TicketEvent
from portal.maintenance.services.tickets import ticket_fire, ticket_transition
from portal.scheduler.models import SchedulerAction as Action
from portal.telemetry.models import XidEvent

HOSTNAME, INDEX = "sim-desk-c", 0
STORY_AGO = dt.timedelta(days=3)  # long enough that the live XID opens a new ticket (REOPEN_WITHIN: 24 h)
RMA_NUMBER = "RMA-2026-0412"
REPAIR = MaintenanceRecord.Kind.REPAIR
BUS = 79


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _checks(*, xid_since: dt.datetime, xid_at: dt.datetime | None) -> list[dict]:
    """The simulated agent's level-1 NVML checks (agents/diagnose.py), with or without an XID; its
    tool version is NVML's (13.<driver>, as agents/simulate.py reports it)."""
    xid = (
        {"name": "XID errors", "category": "Hardware", "result": "fail",
         "info": f"1 XID error(s) since {_rfc3339(xid_since)}: XID {BUS} at {_rfc3339(xid_at)}"}
        if xid_at is not None
        else {"name": "XID errors", "category": "Hardware", "result": "pass",
              "info": f"no XID error since {_rfc3339(xid_since)}"}
    )  # fmt: skip
    return [
        {"name": "GPU answers", "category": "Deployment", "result": "pass", "info": f"GPU {INDEX} answers NVML"},
        {"name": "Uncorrected ECC errors", "category": "Memory", "result": "pass",
         "info": "0 uncorrected ECC errors since the driver loaded"},
        {"name": "Retired pages and row remapping", "category": "Memory", "result": "pass",
         "info": "nothing pending (row remapping)"},
        {"name": "PCIe link", "category": "Integration", "result": "pass", "info": "now Gen4 x16, maximum Gen4 x16"},
        xid,
    ]  # fmt: skip


class _Story:
    """Runs each step now and dates what it wrote (ticket events and resolutions; run() the
    diagnostics) to the step's moment in the story."""

    def __init__(self, gpu: Gpu, start: dt.datetime) -> None:
        self.gpu, self.start = gpu, start
        self.real_start = timezone.now()

    def at(self, hours: float) -> dt.datetime:
        return self.start + dt.timedelta(hours=hours)

    def date(self, moment: dt.datetime) -> None:
        tickets = Ticket.objects.filter(gpu=self.gpu)
        TicketEvent.objects.filter(ticket__in=tickets, at__gte=self.real_start).update(at=moment)
        tickets.filter(resolved_at__gte=self.real_start).update(resolved_at=moment)

    def request(self, tech) -> Diagnostic:
        """The technician asks for a level-1 diagnostic before logging the repair, so that the
        return gate, when the repair resolves the XID ticket, finds it under way rather than
        asking for another one (or leaning on the burn-in the agent runs now)."""
        return diagnostics.diagnostic_request(
            host=self.gpu.host, level=1, gpus=[self.gpu], user=tech, purpose=Diagnostic.Purpose.RETURN
        )

    def run(self, diagnostic: Diagnostic, *, started: dt.datetime, xid_at: dt.datetime | None, since) -> Diagnostic:
        """The agent takes the diagnostic and posts its result, as agents/diagnose.py does."""
        host = self.gpu.host
        finished = started + dt.timedelta(minutes=4)
        requested = started - dt.timedelta(minutes=2)
        Diagnostic.objects.filter(pk=diagnostic.pk).update(
            requested_at=requested, expires_at=requested + diagnostics.expiry_for(diagnostic.level)
        )
        diagnostics.diagnostic_started(diagnostic_id=diagnostic.pk, host=host, started_at=started, now=started)
        result = "fail" if xid_at is not None else "pass"
        diagnostic = diagnostics.diagnostic_result_record(
            diagnostic_id=diagnostic.pk, host=host, started_at=started, finished_at=finished, tool="nvml",
            tool_version=f"13.{host.driver_version}", driver_version=host.driver_version,
            gpus=[{"uuid": self.gpu.uuid, "result": result, "tests": _checks(xid_since=since, xid_at=xid_at)}],
            now=finished,
        )  # fmt: skip
        # What the after-commit hook does (run here so the story reads the same inside a test's transaction).
        diagnostics.gate_diagnostic_finished(diagnostic=diagnostic)
        self.date(finished)
        return diagnostic


def _xid(gpu: Gpu, at: dt.datetime) -> Ticket:
    XidEvent.objects.create(gpu=gpu, ts=at, code=BUS)
    ticket, _ = ticket_fire(rule="xid_bus", host_id=gpu.host_id, gpu_id=gpu.pk, at=at, value=float(BUS),
                            evidence=[[at.timestamp(), BUS]])  # fmt: skip
    return ticket


@transaction.atomic
def repair_story_seed(*, now: dt.datetime | None = None) -> bool:
    """sim-desk-c GPU 0's verified repair (see the module's text). Needs the simulated host's GPUs
    and driver (after story.backfill_history) and the demo's users (seed_demo)."""
    gpu = Gpu.objects.filter(host__hostname=HOSTNAME, index=INDEX).select_related("host").first()
    if gpu is None or MaintenanceRecord.objects.filter(gpu=gpu, kind=REPAIR).exists():
        return False
    users = get_user_model().objects
    tech, admin = users.filter(username="tech").first(), users.filter(username="admin").first()
    story = _Story(gpu, (now or timezone.now()) - STORY_AGO)
    Gpu.objects.filter(pk=gpu.pk, created_at__gt=story.at(-24 * 7)).update(created_at=story.at(-24 * 7))

    # Day 1, 10:00: the GPU falls off the bus.
    ticket = _xid(gpu, story.at(0))
    story.date(story.at(0))
    fleet.gpu_status_set(gpu=gpu, status=Gpu.Status.OUT_FOR_REPAIR, user=tech, at=story.at(0.25),
                         reason="XID 79: GPU fell off the bus; node drained, card pulled for inspection.")  # fmt: skip

    # 13:00: a first repair resolves the ticket; the gate asks for a level-1 diagnostic, which fails.
    asked = story.request(tech)
    with set_actor(tech):
        fleet.record_create(
            kind=REPAIR, host=gpu.host, gpu=gpu, recorded_by=tech, performed_at=story.at(3),
            performed_by="tech (on site)", vendor="in-house", cost="0", downtime_hours="3", outcome="fixed",
            notes="Card re-seated, PCIe power cables re-plugged; no damage seen.",
        )  # fmt: skip
    story.date(story.at(3))
    XidEvent.objects.create(gpu=gpu, ts=story.at(3.28), code=BUS)  # during the diagnostic's stress
    first = story.run(asked, started=story.at(3.25), xid_at=story.at(3.28), since=story.at(3))

    # Day 2, 11:00: the riser replaced under an RMA; the gate's second diagnostic passes.
    asked = story.request(tech)
    with set_actor(tech):
        fleet.record_create(
            kind=REPAIR, host=gpu.host, gpu=gpu, recorded_by=tech, performed_at=story.at(25),
            performed_by="ACME GPU Service", vendor="ACME GPU Service", rma_number=RMA_NUMBER,
            parts="PCIe riser", cost="180.00", downtime_hours="25", outcome="fixed",
            notes="Riser contacts burnt on lane 0-3 (the XID 79 after re-seating); riser replaced.",
        )  # fmt: skip
    story.date(story.at(25))
    second = story.run(asked, started=story.at(25.5), xid_at=None, since=story.at(25))

    # 12:00: back in service through the return-to-service guard (a passed diagnostic after the repair).
    fleet.gpu_status_set(
        gpu=gpu, status=Gpu.Status.IN_SERVICE, user=tech, source=GpuStatusChange.Source.PORTAL, at=story.at(26),
        reason=f"Level-1 diagnostic {second.pk} passed after the riser replacement.",
    )  # fmt: skip
    for open_ticket in Ticket.objects.filter(gpu=gpu, state__in=Ticket.OPEN_STATES):
        ticket_transition(ticket=open_ticket, to_state=Ticket.State.RESOLVED, user=admin or tech,
                          note=f"Repaired ({RMA_NUMBER}); diagnostic {second.pk} passed.")  # fmt: skip
    story.date(story.at(26))
    # The story is from before the demo's Slurm node: no drain or resume of it (the live XID drains).
    Action.objects.filter(host=gpu.host, created_at__gte=story.real_start).delete()
    told = (
        first.state == Diagnostic.State.FAILED
        and second.state == Diagnostic.State.PASSED
        and Ticket.objects.get(pk=ticket.pk).state == Ticket.State.RESOLVED
        # No diagnostic asked for on the way (the gate's): the simulated agent would run it now.
        and not Diagnostic.objects.filter(requested_at__gte=story.real_start, host=gpu.host).exists()
    )
    if not told:  # the services changed under the story: fail loudly rather than show half of it
        raise RuntimeError(f"the demo's repair story did not come out as told ({first.state}, {second.state})")
    return True
