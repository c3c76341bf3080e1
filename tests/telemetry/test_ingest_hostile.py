"""Agents that misbehave must not break the portal.

Identifiers that cannot live in a URL are refused with a 400 naming the field; pages stay up
whatever a stored identifier holds; an empty version is "unknown", not a 500; odd inventory values
are kept as unknown (readings stored, a warning on the GPU's page); a host registers a bounded
number of GPUs. A property test feeds the service every kind of schema-valid inventory: the GPU
model must never refuse what the schema accepts.
"""

import datetime as dt
import uuid as uuidlib

import pytest
from auditlog.models import LogEntry
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.fleet.models import Gpu, Host, MaintenanceRecord
from portal.telemetry.models import Reading
from tests.factories import GpuFactory, HostFactory
from tests.telemetry.batches import gpu_uuid, make_batch, make_gpu, make_reading

pytestmark = pytest.mark.django_db

BAD_UUIDS = ["GPU-a/b", "GPU-a?b", "GPU-a#b", "GPU-a%2Fb", "GPU-a b", "GPU-", "gpu-abc", "..", "MIG-GPU-1c1d/1/0", "x"]


@pytest.mark.parametrize("bad", BAD_UUIDS)
def test_uuids_a_url_cannot_carry_are_refused_naming_the_field(agent, bad):
    answer = agent.post(make_batch(agent.hostname, gpus=[make_gpu(bad)], readings=1))
    assert answer.status_code == 400
    assert {"gpus.0.uuid", "readings.0.gpu_uuid"} <= {item["loc"] for item in answer.json()["detail"]}
    assert not Gpu.objects.exists() and not Reading.objects.exists()


def test_nvml_and_mig_uuids_are_accepted(agent):
    mig = "MIG-1c1d2c1e-6b9b-4b4e-9d0a-6f1c1a2b3c4d"
    answer = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(1), mig], readings=2))
    assert answer.status_code == 202, answer.json()
    assert Gpu.objects.filter(uuid=mig).exists()


@pytest.mark.parametrize("bad", ["a/b", "dgx 07", "dgx-07/..", "-", "a..b", "ä"])
def test_hostnames_a_url_cannot_carry_are_refused(agent, bad):
    answer = agent.post(make_batch(agent.hostname, host={"hostname": bad}))
    assert answer.status_code == 400
    assert [item["loc"] for item in answer.json()["detail"]] == ["host.hostname"]


@pytest.mark.parametrize("field", ["uuid", "hostname"])
def test_people_cannot_store_such_identifiers_either(field, admin, client_for):
    host = HostFactory(hostname="dgx-ok")
    client = client_for(admin)
    if field == "hostname":
        answer = client.post("/hosts/new/", {"hostname": "a/b", "status": "active"})
    else:
        answer = client.post("/gpus/new/", {"uuid": "GPU-a/b", "host": host.pk, "index": 0, "status": "in_service"})
    assert answer.status_code == 400
    assert field.encode() in answer.content
    assert not Host.objects.filter(hostname="a/b").exists() and not Gpu.objects.exists()


def test_pages_stay_up_whatever_a_stored_identifier_holds(viewer, admin, client_for):
    """Rows stored before the rules (or written around them): every link is built and resolves."""
    host = HostFactory()
    Host.objects.filter(pk=host.pk).update(hostname="odd/host ..")
    host.refresh_from_db()
    gpu = GpuFactory(host=host)
    Gpu.objects.filter(pk=gpu.pk).update(uuid="GPU-a/b?c#d%2F..")
    gpu.refresh_from_db()
    for user in (viewer, admin):
        client = client_for(user)
        for url in ("/", "/search/?q=odd", host.get_absolute_url(), gpu.get_absolute_url()):
            assert client.get(url).status_code == 200, url
        page = client.get(gpu.get_absolute_url()).content.decode()
        assert gpu.get_absolute_url() in page or "GPU-a" in page
    client = client_for(admin)
    # Query strings too: "All tickets" and "Add GPU" carry the host name URL-encoded.
    assert "?host=odd%2Fhost%20.." in client.get(host.get_absolute_url()).content.decode()
    assert client.get(f"/api/v1/gpus/{gpu.get_absolute_url().split('/')[2]}").json()["uuid"] == gpu.uuid
    assert client.get(f"{gpu.get_absolute_url()}edit/").status_code == 200
    assert client.get(f"{host.get_absolute_url()}edit/").status_code == 200


def test_empty_versions_are_unknown_not_a_500(agent):
    assert agent.post(make_batch(agent.hostname)).status_code == 202
    answer = agent.post(
        make_batch(
            agent.hostname,
            gpus=[make_gpu(gpu_uuid(0), vbios_version="", name="")],
            host={"driver_version": "", "nvml_version": " ", "agent_version": ""},
        )  # fmt: skip
    )
    assert answer.status_code == 202, answer.json()
    agent.host.refresh_from_db()
    assert (agent.host.driver_version, agent.host.nvml_version) == ("580.65.06", "13.580.65.06")
    assert Gpu.objects.get().vbios_version == "96.00.A5.00.01"
    assert not MaintenanceRecord.objects.exists()
    assert Reading.objects.count() == 2


@pytest.mark.parametrize(
    ("odd", "kept_unknown", "warning"),
    [
        ({"power_limit_default_w": 0.0}, ["power_limit_default_w"], "default power limit of 0 W"),
        ({"temp_slowdown_c": 95, "temp_shutdown_c": 90}, ["temp_slowdown_c", "temp_shutdown_c"], "below the slowdown"),
    ],
)
def test_odd_inventory_values_are_kept_as_unknown_with_a_warning(agent, client_for, viewer, odd, kept_unknown, warning):
    answer = agent.post(make_batch(agent.hostname, gpus=[make_gpu(gpu_uuid(0), **odd)], readings=3))
    assert answer.status_code == 202, answer.json()
    gpu = Gpu.objects.get()
    assert all(getattr(gpu, name) is None for name in kept_unknown)
    assert gpu.memory_total_mib == 143771 and Reading.objects.count() == 3
    assert warning in client_for(viewer).get(gpu.get_absolute_url()).content.decode()
    # Every later batch repeats the inventory: still accepted, the warning stays until the value is sane.
    assert agent.post(make_batch(agent.hostname, gpus=[make_gpu(gpu_uuid(0), **odd)])).status_code == 202
    assert agent.post(make_batch(agent.hostname, gpus=[make_gpu(gpu_uuid(0))])).status_code == 202
    gpu.refresh_from_db()
    assert gpu.agent_warnings == [] and gpu.power_limit_default_w == 700.0 and gpu.temp_shutdown_c == 95


def test_an_odd_value_on_a_known_gpu_keeps_the_known_value(agent):
    assert agent.post(make_batch(agent.hostname)).status_code == 202
    answer = agent.post(make_batch(agent.hostname, gpus=[make_gpu(gpu_uuid(0), temp_shutdown_c=80)]))
    assert answer.status_code == 202
    gpu = Gpu.objects.get()
    assert (gpu.temp_slowdown_c, gpu.temp_shutdown_c) == (90, 95)
    assert "below the slowdown" in gpu.agent_warnings[0]


@override_settings(MAX_GPUS_PER_HOST=4)
def test_gpus_per_host_are_bounded_with_a_clear_answer(agent):
    entries = LogEntry.objects.count()
    answer = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(n) for n in range(6)], readings=6))
    assert answer.status_code == 403
    body = answer.json()
    assert "MAX_GPUS_PER_HOST" in body["error"] and body["detail"][0]["loc"] == "gpus.4.uuid"
    assert not Gpu.objects.exists() and LogEntry.objects.count() == entries
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(n) for n in range(4)], readings=4)).status_code == 202
    again = agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(n) for n in range(5)], readings=5))
    assert again.status_code == 403 and again.json()["detail"][0]["loc"] == "gpus.4.uuid"
    # The GPUs it has keep reporting.
    assert agent.post(make_batch(agent.hostname, gpus=[gpu_uuid(n) for n in range(4)], readings=4)).status_code == 202
    assert Gpu.objects.count() == 4


# --- the schema and the model agree --------------------------------------------------------

texts = st.one_of(st.none(), st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=64))
inventory = st.fixed_dictionaries({
    "index": st.integers(0, 1023),
    "name": texts,
    "serial": texts,
    "pci_bus_id": st.one_of(st.none(), st.text(max_size=32).filter(lambda s: "\x00" not in s)),
    "vbios_version": texts,
    "memory_total_mib": st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    "power_limit_default_w": st.one_of(st.none(), st.floats(0, 10_000)),
    "temp_slowdown_c": st.one_of(st.none(), st.integers(-60, 200)),
    "temp_shutdown_c": st.one_of(st.none(), st.integers(-60, 200)),
    "pcie_link_gen_max": st.one_of(st.none(), st.integers(1, 10)),
    "pcie_link_width_max": st.one_of(st.none(), st.integers(1, 64)),
})  # fmt: skip
host_info = st.fixed_dictionaries({
    "agent_version": texts, "driver_version": texts, "cuda_driver_version": texts, "nvml_version": texts,
})  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=inventory, second=inventory, host=host_info)
def test_any_schema_valid_inventory_is_stored(agent, first, second, host):
    """Twice, so that both a new GPU and a change to a known one are tried (with driver and VBIOS updates)."""
    uuid = f"GPU-{uuidlib.uuid4()}"
    now = dt.datetime.now(dt.UTC)
    for number, values in enumerate((first, second)):
        batch = make_batch(agent.hostname, gpus=[{"uuid": uuid, **values}], readings=0, host=host, now=now)
        batch["readings"] = [make_reading(uuid, now - dt.timedelta(seconds=1 - number))]
        answer = agent.post(batch)
        assert answer.status_code == 202, (answer.json(), values, host)
