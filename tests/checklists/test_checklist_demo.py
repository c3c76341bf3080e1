"""The demo's checklist runs: one in progress, one signed with a failed item (and its ticket)."""

import io

import pytest
from django.core.management import call_command

from portal.checklists.models import ChecklistRun
from portal.demo.checklists import demo_checklists_seed
from portal.maintenance.models import Ticket
from tests.checklists.conftest import ago, readings
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


def test_demo_runs(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    host = HostFactory(hostname="sim-rack-a")
    for i in range(2):
        gpu = GpuFactory(host=host, index=i)
        readings(gpu, start=ago(hours=5), minutes=60, temperature_c=80, power_w=300, utilization_gpu_pct=99)
    assert demo_checklists_seed() == 3
    states = dict(ChecklistRun.objects.values_list("host__hostname", "state"))
    assert states == {"ws-lab-03": "completed", "sim-rack-a": "completed", "dgx-02": "in_progress"}
    assert ChecklistRun.objects.get(host__hostname="sim-rack-a").verification == "pending"
    ticket = Ticket.objects.get(rule="checklist_failed")
    assert "heat discoloration" in ticket.title and ticket.host.hostname == "ws-lab-03"
    assert demo_checklists_seed() == 0  # once
