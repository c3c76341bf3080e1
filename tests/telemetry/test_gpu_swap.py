"""A card swapped in a slot, through the real ingest endpoint: a new GPU at the
PCI bus id of one out for repair, or silent since its repair record, replaces it: the old GPU is
retired ("Replaced by <serial>."), linked from the new one and from the repair record, its "Agent
silent" ticket resolves and never opens again, and the new GPU is registered like any new GPU.
A GPU in service that reports, or reported since its repair, keeps its slot."""

import datetime as dt
import io
import threading

import pytest
from django.test import Client
from django.utils import timezone
from pypdf import PdfReader

from portal.fleet import services as fleet_services
from portal.fleet.models import Gpu, GpuStatusChange, GpuSwap, MaintenanceRecord
from portal.maintenance.models import Ticket
from portal.maintenance.services import beat
from portal.telemetry import ingest_view
from tests.telemetry.batches import gpu_uuid, make_batch, make_gpu, post_batch
from tests.telemetry.conftest import agent_for

OLD, NEW, OTHER, THIRD = gpu_uuid(0x51), gpu_uuid(0x52), gpu_uuid(0x53), gpu_uuid(0x54)
BUS = "00000000:1B:00.0"
OLD_SERIAL, NEW_SERIAL = "1650724000111", "1650724000222"


def gpu(uuid, serial, index=0, **overrides):
    """A GPU in the inventory, at BUS unless told otherwise."""
    return make_gpu(uuid, index=index, serial=serial, **{"pci_bus_id": BUS, **overrides})


def register_old(agent, now):
    """The host's first batch: the old card (index 0, BUS) and a neighbour in another slot."""
    batch = make_batch(
        agent.hostname,
        gpus=[gpu(OLD, OLD_SERIAL), make_gpu(OTHER, index=1, serial="1650724000333")],
        readings=2,
        now=now,
    )
    assert agent.post(batch).status_code == 202
    return Gpu.objects.get(uuid=OLD)


def repair_of(old, at, outcome=MaintenanceRecord.RepairOutcome.PENDING):
    return fleet_services.record_create(
        kind=MaintenanceRecord.Kind.REPAIR, host=old.host, gpu=old, performed_at=at, performed_by="tech",
        vendor="NVIDIA RMA", rma_number="RMA-77", outcome=outcome,
    )  # fmt: skip


def swap_batch(agent, now, new=NEW, serial=NEW_SERIAL):
    """The agent after the swap: the new card in the old one's slot, the neighbour as before."""
    return make_batch(
        agent.hostname, gpus=[gpu(new, serial), make_gpu(OTHER, index=1, serial="1650724000333")], readings=2, now=now
    )


@pytest.fixture
def t0():
    return timezone.now() - dt.timedelta(hours=3)


@pytest.mark.django_db
def test_a_new_card_at_the_bus_id_of_one_out_for_repair_replaces_it(agent, t0):
    old = register_old(agent, t0)
    repair = repair_of(old, t0 + dt.timedelta(minutes=10))
    fleet_services.gpu_status_set(
        gpu=old, status=Gpu.Status.OUT_FOR_REPAIR, reason="XID 79", at=t0 + dt.timedelta(minutes=15)
    )
    at = t0 + dt.timedelta(hours=2)

    assert agent.post(swap_batch(agent, at)).status_code == 202

    old.refresh_from_db()
    new = Gpu.objects.get(uuid=NEW)
    assert old.status == Gpu.Status.RETIRED
    last = old.status_changes.order_by("changed_at", "id").last()
    assert (last.from_status, last.to_status, last.source) == ("out_for_repair", "retired", "agent")
    assert last.reason == f"Replaced by {NEW_SERIAL}."
    # at the batch's readings, never before the old GPU's previous change (its history stays in order)
    previous = old.status_changes.order_by("changed_at", "id").reverse()[1]
    assert last.changed_at == max(at, previous.changed_at)
    swap = GpuSwap.objects.get()
    assert (swap.old_gpu, swap.new_gpu, swap.repair, swap.pci_bus_id, swap.host) == (old, new, repair, BUS, agent.host)
    repair.refresh_from_db()
    assert repair.outcome == MaintenanceRecord.RepairOutcome.REPLACED
    # the new card is a new GPU, in service from its registration by the agent (burn-in hooks on that)
    assert new.status == Gpu.Status.IN_SERVICE
    assert list(new.status_changes.values_list("from_status", "to_status", "source")) == [
        ("", "in_service", GpuStatusChange.Source.AGENT)
    ]
    assert Gpu.objects.get(uuid=OTHER).status == Gpu.Status.IN_SERVICE


@pytest.mark.django_db
def test_a_new_card_at_the_bus_id_of_one_silent_since_its_repair_record_replaces_it(agent, t0):
    old = register_old(agent, t0)
    # still in service (nobody set it out for repair), but its repair record is newer than its last reading
    repair_of(old, t0 + dt.timedelta(minutes=30), outcome=MaintenanceRecord.RepairOutcome.FIXED)

    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=2))).status_code == 202

    old.refresh_from_db()
    assert old.status == Gpu.Status.RETIRED
    assert old.status_changes.last().reason == f"Replaced by {NEW_SERIAL}."
    swap = GpuSwap.objects.get()
    assert swap.new_gpu.uuid == NEW
    assert swap.repair.outcome == MaintenanceRecord.RepairOutcome.FIXED  # a decided outcome stays as written


@pytest.mark.django_db
def test_not_a_swap_when_the_old_card_is_in_service_and_has_no_repair(agent, t0):
    old = register_old(agent, t0)
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=1))).status_code == 202
    old.refresh_from_db()
    assert old.status == Gpu.Status.IN_SERVICE
    assert not GpuSwap.objects.exists()
    assert Gpu.objects.filter(host=agent.host, pci_bus_id=BUS).count() == 2  # registered beside it, as before


@pytest.mark.django_db
def test_not_a_swap_when_the_old_card_reported_since_its_repair(agent, t0):
    old = register_old(agent, t0)
    repair_of(old, t0 - dt.timedelta(hours=1), outcome=MaintenanceRecord.RepairOutcome.FIXED)
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=1))).status_code == 202
    old.refresh_from_db()
    assert old.status == Gpu.Status.IN_SERVICE
    assert not GpuSwap.objects.exists()


@pytest.mark.django_db
def test_not_a_swap_when_the_agent_still_lists_the_old_card(agent, t0):
    old = register_old(agent, t0)
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    batch = make_batch(
        agent.hostname, gpus=[gpu(OLD, OLD_SERIAL), gpu(NEW, NEW_SERIAL, index=2, pci_bus_id=BUS)], readings=2,
        now=t0 + dt.timedelta(hours=1),
    )  # fmt: skip
    assert agent.post(batch).status_code == 202
    old.refresh_from_db()
    assert old.status == Gpu.Status.OUT_FOR_REPAIR
    assert not GpuSwap.objects.exists()


@pytest.mark.django_db
def test_not_a_swap_at_another_bus_id_or_for_a_retired_card(agent, t0):
    old = register_old(agent, t0)
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    other_slot = make_batch(
        agent.hostname, gpus=[gpu(NEW, NEW_SERIAL, index=3, pci_bus_id="00000000:9A:00.0")], readings=1,
        now=t0 + dt.timedelta(hours=1),
    )  # fmt: skip
    assert agent.post(other_slot).status_code == 202
    assert not GpuSwap.objects.exists()
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.RETIRED)
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=2), new=THIRD)).status_code == 202
    assert not GpuSwap.objects.exists()


@pytest.mark.django_db
def test_the_same_batch_twice_and_later_batches_swap_once(agent, t0):
    old = register_old(agent, t0)
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    batch = swap_batch(agent, t0 + dt.timedelta(hours=1))
    assert agent.post(batch).status_code == 202
    assert agent.post(batch).status_code == 200  # the duplicate
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=1, minutes=1))).status_code == 202
    # another new card in the same slot later: the slot's GPU is the swapped-in one, in service
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=2), new=THIRD, serial="X")).status_code == 202
    assert GpuSwap.objects.count() == 1
    assert old.status_changes.filter(to_status=Gpu.Status.RETIRED).count() == 1


@pytest.mark.django_db
def test_no_agent_silent_ticket_for_the_replaced_card(agent, t0, django_capture_on_commit_callbacks):
    old = register_old(agent, t0)
    repair_of(old, t0 + dt.timedelta(minutes=5))
    # silence counts from when readings arrived (now): ten minutes on, the old card has its ticket
    now = timezone.now()
    beat.agent_silent_check(now=now + dt.timedelta(minutes=10))
    ticket = Ticket.objects.get(rule="agent_silent", gpu=old)
    assert ticket.state in Ticket.OPEN_STATES

    with django_capture_on_commit_callbacks(execute=True):  # the swap's hook runs once it commits
        assert agent.post(swap_batch(agent, t0 + dt.timedelta(minutes=25))).status_code == 202

    ticket.refresh_from_db()
    assert ticket.state == Ticket.State.RESOLVED
    assert ticket.auto_resolved
    assert ticket.events.last().note == f"the GPU was replaced by {NEW_SERIAL}"
    # later passes of the silence check never open one for it again
    for minutes in (20, 90, 240):
        beat.agent_silent_check(now=now + dt.timedelta(minutes=minutes))
    assert Ticket.objects.filter(rule="agent_silent", gpu=old).count() == 1
    assert not Ticket.objects.filter(rule="agent_silent", gpu=old, state__in=Ticket.OPEN_STATES).exists()
    # the new card is watched like any other
    assert Ticket.objects.filter(rule="agent_silent", gpu__uuid=NEW, state__in=Ticket.OPEN_STATES).exists()


def pdf_text(content: bytes) -> str:
    return " ".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


@pytest.mark.django_db
def test_the_rma_pack_shows_both_serials(agent, t0, client_for, viewer):
    old = register_old(agent, t0)
    repair_of(old, t0 + dt.timedelta(minutes=10))
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=1))).status_code == 202
    client = client_for(viewer)

    pack = client.get(f"/reports/gpus/{OLD}/rma.json").json()
    assert pack["gpu"]["serial"] == OLD_SERIAL
    assert pack["replaced_by"]["serial"] == NEW_SERIAL
    assert pack["replaced_by"]["uuid"] == NEW
    assert pack["replaced_by"]["pci_bus_id"] == BUS
    assert pack["replaced"] is None
    assert pack["repairs"][0]["replacement"]["serial"] == NEW_SERIAL
    assert pack["repairs"][0]["outcome"] == "replaced"
    assert pack["status_history"][-1]["reason"] == f"Replaced by {NEW_SERIAL}."
    text = pdf_text(client.get(f"/reports/gpus/{OLD}/rma.pdf").content)
    assert OLD_SERIAL in text and NEW_SERIAL in text
    assert "Replaced by" in text

    new_pack = client.get(f"/reports/gpus/{NEW}/rma.json").json()
    assert new_pack["replaced"]["serial"] == OLD_SERIAL
    assert new_pack["replaced_by"] is None
    assert OLD_SERIAL in pdf_text(client.get(f"/reports/gpus/{NEW}/rma.pdf").content)


@pytest.mark.django_db
def test_host_gpu_and_record_pages_show_the_slot_history_with_serials_as_data(agent, t0, client_for, viewer):
    hostile = '<b id="x">S&N</b>'
    old = register_old(agent, t0)
    repair = repair_of(old, t0 + dt.timedelta(minutes=10))
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=1), serial=hostile)).status_code == 202
    client = client_for(viewer)

    page = client.get(f"/hosts/{agent.hostname}/").content.decode()
    assert 'id="slot-history"' in page
    section = page.split('id="slot-history"', 1)[1].split("</section>", 1)[0]
    assert BUS in section and OLD_SERIAL in section
    assert "&lt;b id=&quot;x&quot;&gt;S&amp;N&lt;/b&gt;" in section
    assert '<b id="x">' not in page
    assert section.index(OLD_SERIAL) < section.index("&lt;b id=")  # oldest first
    assert f"/gpus/{NEW}/" in section and repair.get_absolute_url() in section

    gpu_table = page.split('<table class="gpus">', 1)[1].split("</table>", 1)[0]
    assert gpu_table.index(f"/gpus/{NEW}/") < gpu_table.index(f"/gpus/{OLD}/")  # retired last, same index

    old_page = client.get(f"/gpus/{OLD}/").content.decode()
    assert 'id="gpu-replaced-by"' in old_page and f"/gpus/{NEW}/" in old_page
    assert '<b id="x">' not in old_page
    new_page = client.get(f"/gpus/{NEW}/").content.decode()
    assert 'id="gpu-replaced"' in new_page and f"/gpus/{OLD}/" in new_page
    record_page = client.get(repair.get_absolute_url()).content.decode()
    assert "record-replacement" in record_page and f"/gpus/{NEW}/" in record_page
    assert '<b id="x">' not in record_page


@pytest.mark.django_db
def test_a_host_without_swaps_has_no_slot_history(agent, t0, client_for, viewer):
    register_old(agent, t0)
    assert 'id="slot-history"' not in client_for(viewer).get(f"/hosts/{agent.hostname}/").content.decode()


@pytest.mark.django_db
def test_bad_inventory_in_the_swap_batch_stores_nothing(agent, t0, counts):
    old = register_old(agent, t0)
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    before = counts()
    batch = swap_batch(agent, t0 + dt.timedelta(hours=1))
    batch["gpus"][0]["pci_bus_id"] = "x" * 33  # longer than the protocol allows
    response = agent.post(batch)
    assert response.status_code == 400
    assert "gpus.0.pci_bus_id" in response.content.decode()
    assert counts() == before
    old.refresh_from_db()
    assert old.status == Gpu.Status.OUT_FOR_REPAIR
    assert not GpuSwap.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_new_cards_at_once_in_one_slot_swap_it_once(transactional_db, require_postgres, monkeypatch):
    monkeypatch.setattr(ingest_view, "run_in_pool", True)
    agent = agent_for("dgx-swap-race")
    t0 = timezone.now() - dt.timedelta(hours=3)
    old = register_old(agent, t0)
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    batches = [
        swap_batch(agent, t0 + dt.timedelta(hours=1), new=NEW, serial="A1"),
        swap_batch(agent, t0 + dt.timedelta(hours=1), new=THIRD, serial="B2"),
    ]
    start = threading.Barrier(2)
    answers = []

    def send(batch):
        start.wait()
        answers.append(post_batch(Client(), agent.token, batch))

    threads = [threading.Thread(target=send, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(r.status_code for r in answers) == [202, 202], [r.content for r in answers]
    swap = GpuSwap.objects.get()
    old.refresh_from_db()
    assert old.status == Gpu.Status.RETIRED
    assert old.status_changes.filter(to_status=Gpu.Status.RETIRED).count() == 1
    assert old.status_changes.last().reason == f"Replaced by {swap.new_gpu.serial}."


@pytest.mark.django_db
def test_the_django_admin_lists_swaps_read_only(agent, t0, client_for, admin):
    old = register_old(agent, t0)
    fleet_services.gpu_status_set(gpu=old, status=Gpu.Status.OUT_FOR_REPAIR)
    assert agent.post(swap_batch(agent, t0 + dt.timedelta(hours=1))).status_code == 202
    client = client_for(admin)
    listing = client.get("/admin/fleet/gpuswap/")
    assert listing.status_code == 200 and BUS in listing.content.decode()
    assert client.get("/admin/fleet/gpuswap/add/").status_code == 403
    swap = GpuSwap.objects.get()
    assert client.post(f"/admin/fleet/gpuswap/{swap.pk}/delete/", {"post": "yes"}).status_code == 403
    assert GpuSwap.objects.filter(pk=swap.pk).exists()
