"""Host and GPU forms: bad input gets a 400 with the error beside the field and changes nothing."""

import pytest

from portal.core.errors import InvalidInput
from portal.fleet import services
from portal.fleet.models import Gpu, Host
from tests.core.pages import field_errors, form_errors
from tests.factories import GpuFactory, HostFactory, RecordFactory

pytestmark = pytest.mark.django_db


def host_data(**changes):
    return {"hostname": "dgx-05", "location": "B2", "rack": "R1", "status": "active", **changes}


def gpu_data(host_obj, **changes):
    data = {
        "uuid": "GPU-new-0001",
        "host": host_obj.pk,
        "index": 0,
        "status": "in_service",
        "memory_total_mib": "81920",
        "temp_slowdown_c": "87",
        "temp_shutdown_c": "92",
        "install_date": "2025-01-10",
        "warranty_end": "2028-01-10",
    }
    return {**data, **changes}


def rows(model):
    return list(model.objects.order_by("pk").values())


def test_host_create_and_edit_succeed(client_for, admin):
    client = client_for(admin)
    assert client.post("/hosts/new/", host_data()).status_code == 302
    assert client.post("/hosts/dgx-05/edit/", host_data(rack="R2")).status_code == 302
    assert Host.objects.get().rack == "R2"


HOST_BAD = [
    ("duplicate-hostname", {"hostname": "dgx-01"}, "hostname"),
    ("empty-hostname", {"hostname": ""}, "hostname"),
    ("unknown-status", {"status": "on-fire"}, "status"),
]


@pytest.mark.parametrize(("changes", "field"), [c[1:] for c in HOST_BAD], ids=[c[0] for c in HOST_BAD])
def test_host_create_rejects_bad_input(changes, field, client_for, admin):
    HostFactory(hostname="dgx-01")
    before = rows(Host)
    response = client_for(admin).post("/hosts/new/", host_data(**changes))
    assert response.status_code == 400
    assert field_errors(response, field)
    assert rows(Host) == before


@pytest.mark.parametrize(("changes", "field"), [c[1:] for c in HOST_BAD], ids=[c[0] for c in HOST_BAD])
def test_host_edit_rejects_bad_input_and_keeps_the_host(changes, field, client_for, admin):
    HostFactory(hostname="dgx-01")
    HostFactory(hostname="dgx-05", rack="R1", location="B2")
    before = rows(Host)
    response = client_for(admin).post("/hosts/dgx-05/edit/", host_data(rack="R9", **changes))
    assert response.status_code == 400
    assert field_errors(response, field)
    assert rows(Host) == before
    # The form page shows the title of the stored host, not the rejected input.
    assert "Edit host dgx-05" in response.content.decode()


def test_gpu_create_and_edit_succeed(client_for, admin):
    host = HostFactory()
    client = client_for(admin)
    assert client.post("/gpus/new/", gpu_data(host)).status_code == 302
    assert client.post("/gpus/GPU-new-0001/edit/", gpu_data(host, serial="S-1")).status_code == 302
    assert Gpu.objects.get().serial == "S-1"


GPU_BAD = [
    ("duplicate-uuid", {"uuid": "GPU-taken"}, "uuid"),
    ("shutdown-below-slowdown", {"temp_slowdown_c": "90", "temp_shutdown_c": "85"}, "temp_shutdown_c"),
    ("warranty-before-install", {"install_date": "2025-06-01", "warranty_end": "2025-05-31"}, "warranty_end"),
    ("non-numeric-memory", {"memory_total_mib": "80 GB"}, "memory_total_mib"),
    ("negative-memory", {"memory_total_mib": "-1"}, "memory_total_mib"),
    ("zero-power-limit", {"power_limit_default_w": "0"}, "power_limit_default_w"),
    ("unknown-host", {"host": "999999"}, "host"),
    ("bad-date", {"install_date": "last spring"}, "install_date"),
]


@pytest.mark.parametrize(("changes", "field"), [c[1:] for c in GPU_BAD], ids=[c[0] for c in GPU_BAD])
def test_gpu_create_rejects_bad_input(changes, field, client_for, admin):
    host = HostFactory()
    GpuFactory(uuid="GPU-taken", host=host)
    before = rows(Gpu)
    response = client_for(admin).post("/gpus/new/", gpu_data(host, **changes))
    assert response.status_code == 400
    assert field_errors(response, field), response.content.decode()[-3000:]
    assert rows(Gpu) == before


@pytest.mark.parametrize(("changes", "field"), [c[1:] for c in GPU_BAD], ids=[c[0] for c in GPU_BAD])
def test_gpu_edit_rejects_bad_input_and_keeps_the_gpu(changes, field, client_for, admin):
    host = HostFactory()
    GpuFactory(uuid="GPU-taken", host=host)
    GpuFactory(uuid="GPU-new-0001", host=host, serial="OLD", index=1)
    before = rows(Gpu)
    response = client_for(admin).post("/gpus/GPU-new-0001/edit/", gpu_data(host, serial="NEW", **changes))
    assert response.status_code == 400
    assert field_errors(response, field)
    assert rows(Gpu) == before


def test_service_errors_are_keyed_by_field():
    host = HostFactory()
    with pytest.raises(InvalidInput) as caught:
        services.gpu_create(uuid="GPU-x", host=host, temp_slowdown_c=90, temp_shutdown_c=80)
    assert set(caught.value.field_errors) == {"temp_shutdown_c"}
    with pytest.raises(InvalidInput) as caught:
        services.host_create(hostname="h", flavour="vanilla")
    assert set(caught.value.field_errors) == {"flavour"}
    assert not Gpu.objects.exists() and not Host.objects.filter(hostname="h").exists()


def test_host_with_gpus_cannot_be_deleted(client_for, admin):
    gpu = GpuFactory()
    response = client_for(admin).post(f"/hosts/{gpu.host.hostname}/delete/")
    assert response.status_code == 400
    assert any("retire it instead" in e for e in form_errors(response))
    assert Host.objects.filter(pk=gpu.host.pk).exists()


def test_gpu_with_records_cannot_be_deleted(client_for, admin):
    record = RecordFactory()
    response = client_for(admin).post(f"/gpus/{record.gpu.uuid}/delete/")
    assert response.status_code == 400
    assert form_errors(response)
    assert Gpu.objects.filter(pk=record.gpu.pk).exists()
