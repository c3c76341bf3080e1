"""The demo's repair history (`manage.py seed_repair_history` after `seed_demo`) shows a card swapped
in a slot: ws-lab-03 GPU 0 out for repair, then retired by the swap, linked to its exchange card and
its repair record; seeding again changes nothing."""

import pytest
from django.core.management import call_command

from portal.demo.repair_history import repair_history_seed
from portal.fleet.models import Gpu, GpuSwap, MaintenanceRecord
from portal.fleet.swaps import host_slot_history

pytestmark = pytest.mark.django_db


def test_the_demo_shows_one_swap(client_for, viewer):
    call_command("seed_demo", verbosity=0)
    assert repair_history_seed() is True
    swap = GpuSwap.objects.select_related("old_gpu", "new_gpu", "repair").get()
    assert swap.host.hostname == "ws-lab-03"
    assert swap.old_gpu.status == Gpu.Status.RETIRED
    assert swap.old_gpu.status_changes.last().reason == f"Replaced by {swap.new_gpu.serial}."
    assert swap.repair.outcome == MaintenanceRecord.RepairOutcome.REPLACED
    assert swap.new_gpu.pci_bus_id == swap.old_gpu.pci_bus_id == swap.pci_bus_id
    [slot] = host_slot_history(host=swap.host, gpus=list(swap.host.gpus.all()))
    assert [stint.gpu for stint in slot.stints] == [swap.old_gpu, swap.new_gpu]
    page = client_for(viewer).get("/hosts/ws-lab-03/").content.decode()
    assert 'id="slot-history"' in page and swap.new_gpu.serial in page

    assert repair_history_seed() is False
    assert GpuSwap.objects.count() == 1
