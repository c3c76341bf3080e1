"""The demo's inventory: a part below its reorder level (its ticket open), a warranty ending within
60 days (its ticket open), and the RMA case of sim-desk-c GPU 0's repair through replacement_received."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from portal.demo import repair, story
from portal.demo.inventory import REPLACEMENT_SERIAL, inventory_demo_seed
from portal.demo.repair_history import repair_history_seed
from portal.diagnostics.models import Diagnostic
from portal.diagnostics.services import diagnostic_request
from portal.fleet.models import Gpu
from portal.inventory.models import Part, RmaCase, Warranty
from portal.maintenance.models import Ticket

pytestmark = pytest.mark.django_db


def test_the_demo_inventory(settings, tmp_path, client_for, viewer):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", verbosity=0)
    assert repair_history_seed() is True
    story.prepare_simulated_hosts()
    story.backfill_history(span=dt.timedelta(minutes=10))
    gpu = Gpu.objects.select_related("host").get(host__hostname="sim-desk-c", index=0)
    diagnostic_request(host=gpu.host, level=1, purpose=Diagnostic.Purpose.BURN_IN)
    assert repair.repair_story_seed() is True
    assert inventory_demo_seed() is True
    assert inventory_demo_seed() is False  # idempotent

    riser = Part.objects.get(kind="riser")
    assert riser.on_hand <= riser.reorder_at
    assert riser.movements.get(reason="used").record.rma_number == repair.RMA_NUMBER
    low = Ticket.objects.get(rule="spare_stock_low", state="open")
    assert low.title == f"Spare stock low: {riser.name}"
    ending = Warranty.objects.get(hosts__hostname="dgx-02")
    assert ending.ends_on <= timezone.localdate() + dt.timedelta(days=60)
    assert Ticket.objects.get(rule="warranty_ending", state="open").title == "Warranty ending: Dell PS-2023-118"

    case = RmaCase.objects.get(gpu=gpu)
    assert case.state == "replacement_received" and case.case_number == repair.RMA_NUMBER
    assert case.replacement_serial == REPLACEMENT_SERIAL and case.covered and case.ticket.rule == "xid_bus"
    assert 1 <= case.turnaround_days <= 3
    client = client_for(viewer)
    assert client.get(f"/api/v1/gpus/{gpu.uuid}").json()["warranty"]["contract"] == "SM-SVC-2024-0917"
    assert "ACME GPU Service" in client.get(gpu.get_absolute_url()).content.decode()
