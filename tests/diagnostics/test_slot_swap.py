"""A card swapped in a slot (portal.fleet.swaps) starts with a burn-in diagnostic of its own, and
the old card gets no "Agent silent" ticket. tests/telemetry/test_gpu_swap.py covers the swap itself."""

import pytest

from portal.diagnostics.models import Diagnostic
from portal.fleet import services as fleet_services
from portal.fleet.models import Gpu, GpuStatusChange, GpuSwap
from portal.maintenance.models import Ticket
from portal.maintenance.services.beat import agent_silent_check
from tests.telemetry.batches import gpu_uuid, make_batch, make_gpu, post_batch

pytestmark = pytest.mark.django_db

OLD, NEIGHBOUR, NEW = gpu_uuid(1), gpu_uuid(2), gpu_uuid(9)


def post(agent, gpus):
    answer = post_batch(agent.client, agent.token, make_batch(agent.host.hostname, gpus=gpus, readings=len(gpus)))
    assert answer.status_code == 202, answer.content
    return answer


def test_a_new_card_in_a_repaired_slot_replaces_the_old_one(agent, settings, client_for, viewer, technician,
                                                            django_capture_on_commit_callbacks):  # fmt: skip
    post(agent, [make_gpu(OLD, index=0, serial="OLD-0001"), make_gpu(NEIGHBOUR, index=1)])
    old = Gpu.objects.get(uuid=OLD)
    fleet_services.gpu_status_set(gpu=old, status="out_for_repair", user=technician, reason="XID 79")
    settings.BURN_IN_LEVEL = 1
    swapped = make_gpu(NEW, index=0, serial="NEW-0002")  # index 0: the same slot, 00000000:1B:00.0
    with django_capture_on_commit_callbacks(execute=True):
        post(agent, [swapped, make_gpu(NEIGHBOUR, index=1)])
    old.refresh_from_db()
    new = Gpu.objects.get(uuid=NEW)
    assert old.status == "retired" and GpuSwap.objects.get(old_gpu=old).new_gpu == new
    assert new.status == "in_service"
    change = GpuStatusChange.objects.filter(gpu=old).latest("changed_at")
    assert (change.from_status, change.to_status, change.reason, change.source) == (
        "out_for_repair", "retired", "Replaced by NEW-0002.", "agent",
    )  # fmt: skip
    burn_in = Diagnostic.objects.get(purpose="burn_in")
    assert list(burn_in.gpus.values_list("gpu_id", flat=True)) == [new.pk]
    rma = client_for(technician).get(f"/reports/gpus/{OLD}/rma.json").json()
    assert rma["replaced_by"]["serial"] == "NEW-0002"
    assert client_for(technician).get(f"/reports/gpus/{NEW}/rma.json").json()["replaced"]["serial"] == "OLD-0001"
    # The old card never reports again: no "Agent silent" for it.
    agent_silent_check()
    assert not Ticket.objects.filter(rule="agent_silent", gpu=old).exists()


def test_a_new_card_beside_a_working_one_replaces_nothing(agent):
    post(agent, [make_gpu(OLD, index=0)])
    post(agent, [make_gpu(OLD, index=0), make_gpu(NEW, index=0)])  # same bus id, the old one in service
    assert not GpuSwap.objects.exists()
    assert Gpu.objects.get(uuid=OLD).status == "in_service"
