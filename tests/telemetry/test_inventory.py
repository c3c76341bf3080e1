"""The agent's inventory: GPUs appear by themselves, changes become maintenance records, unknown
(null) values never overwrite known ones, and an unchanged inventory costs no queries."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu, MaintenanceRecord
from tests.telemetry.batches import gpu_uuid, iso, make_batch, make_gpu

pytestmark = pytest.mark.django_db

A, B = gpu_uuid(1), gpu_uuid(2)


def test_a_new_gpu_appears_with_its_inventory(agent, client_for, viewer):
    gpu_a = make_gpu(A, 0, serial="1650724000042", pci_bus_id="00000000:1B:00.0", power_limit_default_w=700.0)
    gpu_b = make_gpu(B, 1, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559, temp_slowdown_c=87)
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_a, gpu_b], readings=2)).status_code == 202

    gpu = Gpu.objects.get(uuid=A)
    assert gpu.host == agent.host
    assert (gpu.index, gpu.model_name, gpu.serial, gpu.pci_bus_id, gpu.vbios_version) == (
        0, "NVIDIA H200", "1650724000042", "00000000:1B:00.0", "96.00.A5.00.01",
    )  # fmt: skip
    assert (gpu.memory_total_mib, gpu.power_limit_default_w, gpu.temp_slowdown_c, gpu.temp_shutdown_c) == (
        143771, 700.0, 90, 95,
    )  # fmt: skip
    assert (gpu.pcie_link_gen_max, gpu.pcie_link_width_max, gpu.status) == (5, 16, Gpu.Status.IN_SERVICE)
    other = Gpu.objects.get(uuid=B)
    assert (other.index, other.model_name, other.memory_total_mib, other.temp_slowdown_c) == (
        1, "NVIDIA H100 80GB HBM3", 81559, 87,
    )  # fmt: skip
    agent.host.refresh_from_db()
    assert (agent.host.agent_version, agent.host.driver_version) == ("0.1.0", "580.65.06")
    assert (agent.host.cuda_driver_version, agent.host.nvml_version) == ("13.0", "13.580.65.06")
    # The first report of a driver is not an update.
    assert not MaintenanceRecord.objects.exists()

    page = client_for(viewer).get("/")
    assert page.status_code == 200 and agent.hostname in page.content.decode()
    rows = client_for(viewer).get(f"/hosts/{agent.hostname}/gpus/")  # the host row's GPUs, on demand
    html = rows.content.decode()
    assert "NVIDIA H100 80GB HBM3" in html and "NVIDIA H200" in html
    assert A[4:12] in html and B[4:12] in html
    assert "580.65.06" in page.content.decode()  # the host row shows the driver


def test_a_changed_driver_version_becomes_a_driver_update_record(agent):
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1)).status_code == 202
    now = timezone.now()
    batch = make_batch(agent.hostname, gpus=[A], readings=3, now=now, host={"driver_version": "590.44.01"})
    assert agent.post(batch).status_code == 202

    record = MaintenanceRecord.objects.get()
    assert record.kind == MaintenanceRecord.Kind.DRIVER_UPDATE
    assert (record.host, record.gpu) == (agent.host, None)
    assert (record.from_version, record.to_version) == ("580.65.06", "590.44.01")
    assert record.performed_by == "agent"
    assert abs(record.performed_at - now) < dt.timedelta(seconds=1)
    agent.host.refresh_from_db()
    assert agent.host.driver_version == "590.44.01"
    # reported again: no second record
    assert agent.post(make_batch(agent.hostname, gpus=[A], host={"driver_version": "590.44.01"})).status_code == 202
    assert MaintenanceRecord.objects.count() == 1


def test_a_changed_vbios_becomes_a_firmware_update_record(agent):
    assert agent.post(make_batch(agent.hostname, gpus=[A, B], readings=2)).status_code == 202
    gpus = [make_gpu(A, 0, vbios_version="96.00.A5.00.02"), make_gpu(B, 1)]
    assert agent.post(make_batch(agent.hostname, gpus=gpus, readings=2)).status_code == 202

    record = MaintenanceRecord.objects.get()
    assert record.kind == MaintenanceRecord.Kind.FIRMWARE_UPDATE
    assert record.gpu == Gpu.objects.get(uuid=A)
    assert record.host == agent.host
    assert (record.from_version, record.to_version, record.performed_by) == (
        "96.00.A5.00.01", "96.00.A5.00.02", "agent",
    )  # fmt: skip
    assert Gpu.objects.get(uuid=A).vbios_version == "96.00.A5.00.02"
    assert Gpu.objects.get(uuid=B).vbios_version == "96.00.A5.00.01"


def test_null_inventory_values_never_overwrite_known_ones(agent):
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1)).status_code == 202
    before = Gpu.objects.values().get(uuid=A)
    unknown = {name: None for name in make_gpu(A) if name not in ("uuid", "index")}
    batch = make_batch(
        agent.hostname, gpus=[make_gpu(A, 0, **unknown)], readings=1,
        host={"driver_version": None, "agent_version": None, "cuda_driver_version": None, "nvml_version": None},
    )  # fmt: skip
    assert agent.post(batch).status_code == 202
    assert Gpu.objects.values().get(uuid=A) == before
    agent.host.refresh_from_db()
    assert (agent.host.driver_version, agent.host.agent_version, agent.host.nvml_version) == (
        "580.65.06", "0.1.0", "13.580.65.06",
    )  # fmt: skip
    assert not MaintenanceRecord.objects.exists()
    # and a known value that changes is applied, the nulls around it still ignored
    batch = make_batch(agent.hostname, gpus=[make_gpu(A, 3, **{**unknown, "memory_total_mib": 141000})])
    assert agent.post(batch).status_code == 202
    gpu = Gpu.objects.get(uuid=A)
    assert (gpu.index, gpu.memory_total_mib, gpu.model_name, gpu.serial) == (3, 141000, "NVIDIA H200", "1650724000000")


def test_dropped_and_rejected_batches_show_on_the_host_page(agent, client_for, viewer):
    batch = make_batch(agent.hostname, gpus=[A], host={"dropped_batches": 3, "rejected_batches": 2})
    assert agent.post(batch).status_code == 202
    agent.host.refresh_from_db()
    assert agent.host.dropped_batches == 3
    page = client_for(viewer).get(agent.host.get_absolute_url())
    assert page.status_code == 200
    html = page.content.decode()
    assert "3 batches dropped" in html
    assert "2 batches refused" in html
    # the host API reports it too
    hosts = client_for(viewer).get("/api/v1/hosts").json()
    assert [(h["hostname"], h["dropped_batches"]) for h in hosts["items"]] == [(agent.hostname, 3)]


def test_a_batch_without_inventory_for_known_gpus_is_stored(agent, counts):
    assert agent.post(make_batch(agent.hostname, gpus=[A, B], readings=2)).status_code == 202
    response = agent.post(make_batch(agent.hostname, gpus=[A, B], readings=6, inventory=False))
    assert response.status_code == 202
    assert counts()["readings"] == 8
    assert counts()["gpus"] == 2


def test_an_unchanged_inventory_writes_nothing(agent, django_assert_max_num_queries):
    gpus = [A, B, gpu_uuid(3), gpu_uuid(4)]
    assert agent.post(make_batch(agent.hostname, gpus=gpus, readings=8)).status_code == 202
    gpu_rows = list(Gpu.objects.order_by("pk").values())
    agent.host.refresh_from_db()
    host_row = agent.host.__dict__.copy()
    batch = make_batch(agent.hostname, gpus=gpus, readings=100)

    # token lookup, duplicate check, GPU lookup, batch row, readings, latest, savepoints: a
    # fixed handful whatever the number of readings, and no write to the host or its GPUs
    with django_assert_max_num_queries(10) as captured:
        response = agent.post(batch)
    assert response.status_code == 202
    statements = [query["sql"] for query in captured.captured_queries]
    assert not [sql for sql in statements if sql.startswith("UPDATE") and "fleet_" in sql]
    assert not [sql for sql in statements if "INSERT" in sql and "fleet_" in sql]
    assert list(Gpu.objects.order_by("pk").values()) == gpu_rows
    agent.host.refresh_from_db()
    assert {k: v for k, v in agent.host.__dict__.items() if k != "_state"} == {
        k: v for k, v in host_row.items() if k != "_state"
    }


def test_driver_change_in_a_batch_without_readings_and_a_fast_clock_is_not_a_server_error(agent):
    """With no readings the record's time comes from sent_at; an agent clock running ahead must
    not turn a valid batch into a 5xx (the record would be "in the future")."""
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1)).status_code == 202
    ahead = timezone.now() + dt.timedelta(hours=2)
    batch = make_batch(agent.hostname, gpus=[A], readings=0, host={"driver_version": "590.44.01"}, sent_at=iso(ahead))
    response = agent.post(batch)
    assert response.status_code < 500, response.content
    if response.status_code == 202:
        record = MaintenanceRecord.objects.get()
        assert record.performed_at <= timezone.now() + dt.timedelta(minutes=1)
