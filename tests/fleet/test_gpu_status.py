"""GPU status history and PATCH /api/v1/gpus/{uuid}: every change kept (time, user, from/to,
reason, source), the repair hold (out_for_repair → in_service only through a checklist run, an
admin's override recorded), bad input naming the field, roles."""

import datetime as dt
import json

import pytest
from django.utils import timezone

from portal.core.errors import Conflict, Forbidden, InvalidInput
from portal.fleet import services
from portal.fleet.models import Gpu, GpuStatusChange
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

Source = GpuStatusChange.Source


def patch(client, uuid, body):
    return client.patch(f"/api/v1/gpus/{uuid}", json.dumps(body), content_type="application/json")


@pytest.fixture
def gpu():
    return GpuFactory(host=HostFactory(hostname="node-a"), index=2, serial="1650724000042")


def history(gpu):
    return list(GpuStatusChange.objects.filter(gpu=gpu).order_by("changed_at", "id"))


def test_gpu_create_starts_the_history(admin):
    host = HostFactory()
    gpu = services.gpu_create(uuid="GPU-new", host=host, user=admin)
    (row,) = history(gpu)
    assert (row.from_status, row.to_status, row.changed_by, row.changed_at) == ("", "in_service", admin, gpu.created_at)


def test_status_set_keeps_time_user_from_to_reason_source(technician, gpu):
    change = services.gpu_status_set(
        gpu=gpu, status="out_for_repair", user=technician, reason="XID 79", source=Source.API
    )
    gpu.refresh_from_db()
    assert gpu.status == "out_for_repair"
    assert (change.from_status, change.to_status, change.changed_by, change.reason, change.source, change.override) == (
        "in_service", "out_for_repair", technician, "XID 79", "api", False,
    )  # fmt: skip
    assert abs(change.changed_at - timezone.now()) < dt.timedelta(seconds=5)
    # The same status again changes nothing.
    assert services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, source=Source.API) is None
    assert len(history(gpu)) == 1


def test_without_guards_the_repair_hold_is_a_checklist_or_an_admin_override(technician, admin, gpu, monkeypatch):
    """Fleet by itself (no app owns the return-to-service gate)."""
    from portal.fleet import hooks

    monkeypatch.setattr(hooks.return_to_service_gate, "_function", None)
    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, source=Source.API)
    with pytest.raises(Conflict) as refused:
        services.gpu_status_set(gpu=gpu, status="in_service", user=technician, source=Source.API)
    assert "repair-return checklist" in refused.value.message
    gpu.refresh_from_db()
    assert gpu.status == "out_for_repair"
    # A passed repair_return run (checklists call with source="checklist") returns it.
    change = services.gpu_status_set(gpu=gpu, status="in_service", user=technician, source=Source.CHECKLIST)
    assert change.override is False
    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, source=Source.API)
    change = services.gpu_status_set(gpu=gpu, status="in_service", user=admin, reason="swap", source=Source.API)
    assert change.override is True and change.changed_by == admin
    # Retiring a GPU out for repair is not a return to service: allowed.
    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, source=Source.API)
    assert services.gpu_status_set(gpu=gpu, status="retired", user=technician, source=Source.API).override is False


def test_with_the_diagnostics_guard_even_an_admin_or_a_checklist_needs_a_pass_or_a_force(technician, admin, gpu):
    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, source=Source.API)
    for user, source in ((technician, Source.API), (admin, Source.API), (technician, Source.CHECKLIST)):
        with pytest.raises(Conflict) as refused:
            services.gpu_status_set(gpu=gpu, status="in_service", user=user, source=source)
        assert "diagnostic" in refused.value.message and refused.value.field_errors.keys() == {"status"}
    with pytest.raises(Forbidden):
        services.gpu_status_set(gpu=gpu, status="in_service", user=technician, reason="x", force=True)
    with pytest.raises(InvalidInput) as refused:
        services.gpu_status_set(gpu=gpu, status="in_service", user=admin, reason=" ", force=True)
    assert refused.value.field_errors.keys() == {"notes"}
    change = services.gpu_status_set(gpu=gpu, status="in_service", user=admin, reason="vendor-tested", force=True)
    assert change.override is True and change.changed_by == admin and change.reason == "vendor-tested"


def test_status_set_bad_status_is_invalid_input(admin, gpu):
    with pytest.raises(InvalidInput) as refused:
        services.gpu_status_set(gpu=gpu, status="melted", user=admin, source=Source.API)
    assert refused.value.field_errors.keys() == {"status"}


def test_gpu_update_routes_status_through_the_history(admin, technician, gpu):
    services.gpu_update(gpu=gpu, user=admin, status="out_for_repair", notes="sent to vendor")
    rows = [(r.from_status, r.to_status, r.source) for r in history(gpu)]
    assert rows == [("in_service", "out_for_repair", "portal")]
    with pytest.raises(Conflict):
        services.gpu_update(gpu=gpu, user=technician, status="in_service", notes="back")
    gpu.refresh_from_db()
    assert gpu.notes == "sent to vendor"  # a refused change writes nothing


def test_patch_as_technician_200_with_the_gpu(client_for, technician, gpu):
    response = patch(
        client_for(technician), gpu.uuid,
        {"status": "out_for_repair", "install_date": "2024-02-01", "warranty_end": "2027-02-01",
         "notes": "fans noisy", "reason": "XID 79 twice"},
    )  # fmt: skip
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["uuid"] == gpu.uuid and data["hostname"] == "node-a" and data["index"] == 2
    assert (data["status"], data["install_date"], data["warranty_end"], data["notes"]) == (
        "out_for_repair", "2024-02-01", "2027-02-01", "fans noisy",
    )  # fmt: skip
    (row,) = history(gpu)
    assert (row.changed_by, row.source, row.reason) == (technician, "api", "XID 79 twice")
    listed = client_for(technician).get(f"/api/v1/gpus/{gpu.uuid}/status-history").json()
    assert listed[-1]["to_status"] == "out_for_repair" and listed[-1]["changed_by"] == "bob"


def test_patch_only_changes_what_is_sent(client_for, technician, gpu):
    Gpu.objects.filter(pk=gpu.pk).update(notes="keep me")
    response = patch(client_for(technician), gpu.uuid, {"install_date": "2024-02-01"})
    assert response.status_code == 200
    assert response.json()["notes"] == "keep me" and response.json()["status"] == "in_service"
    assert history(gpu) == []


def test_patch_return_to_service_409_without_a_diagnostic_force_for_admin(client_for, technician, admin, gpu):
    assert patch(client_for(technician), gpu.uuid, {"status": "out_for_repair"}).status_code == 200
    for user in (technician, admin):
        response = patch(client_for(user), gpu.uuid, {"status": "in_service", "notes": "fixed"})
        assert response.status_code == 409
        assert "diagnostic" in response.json()["error"]
        assert response.json()["detail"][0]["loc"] == "status"
    gpu.refresh_from_db()
    assert (gpu.status, gpu.notes) == ("out_for_repair", "")
    forced = {"status": "in_service", "force": True, "notes": "vendor confirmed"}
    assert patch(client_for(technician), gpu.uuid, forced).status_code == 403
    response = patch(client_for(admin), gpu.uuid, {"status": "in_service", "force": True})
    assert response.status_code == 400 and response.json()["detail"][0]["loc"] == "notes"
    assert patch(client_for(admin), gpu.uuid, {"force": True, "notes": "x"}).status_code == 400  # nothing to force
    gpu.refresh_from_db()
    assert gpu.status == "out_for_repair"
    response = patch(client_for(admin), gpu.uuid, forced)
    assert response.status_code == 200
    assert response.json()["notes"] == ""  # the notes went to the status history, not the GPU's notes
    assert (history(gpu)[-1].override, history(gpu)[-1].reason) == (True, "vendor confirmed")


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"status": "melted"}, "status"),
        ({"status": None}, "status"),
        ({"install_date": "yesterday"}, "install_date"),
        ({"warranty_end": "2020-13-01"}, "warranty_end"),
        ({"install_date": "2024-02-01", "warranty_end": "2023-01-01"}, "warranty_end"),
        ({"notes": 5}, "notes"),
        ({"serial": "X"}, "serial"),  # not a field PATCH may change
    ],
)
def test_patch_bad_input_400_names_the_field(client_for, admin, gpu, body, loc):
    response = patch(client_for(admin), gpu.uuid, body)
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    gpu.refresh_from_db()
    assert (gpu.status, gpu.install_date, gpu.warranty_end) == ("in_service", None, None)


def test_patch_roles_and_unknown(client_for, actors, gpu):
    assert patch(client_for(actors["viewer"]), gpu.uuid, {"status": "retired"}).status_code == 403
    assert patch(client_for(actors["outsider"]), gpu.uuid, {"status": "retired"}).status_code == 403
    assert patch(client_for(None), gpu.uuid, {"status": "retired"}).status_code == 401
    gpu.refresh_from_db()
    assert gpu.status == "in_service"
    assert patch(client_for(actors["admin"]), "GPU-nope", {"status": "retired"}).status_code == 404
    assert patch(client_for(actors["admin"]), gpu.uuid, {"status": "retired"}).status_code == 200


def test_gpu_form_change_is_in_the_history(client_for, admin, gpu):
    from portal.fleet.forms import GpuForm

    data = {name: value for name, value in GpuForm(instance=gpu).initial.items() if value is not None}
    data.update(host=gpu.host_id, status="retired")
    response = client_for(admin).post(f"/gpus/{gpu.uuid}/edit/", data)
    assert response.status_code == 302, response.content
    (row,) = history(gpu)
    assert (row.to_status, row.source, row.changed_by) == ("retired", "portal", admin)


def test_gpu_form_return_to_service_needs_a_diagnostic_or_a_forced_reason(client_for, admin, gpu):
    from portal.fleet.forms import GpuForm

    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=admin, source=Source.API)
    data = {name: value for name, value in GpuForm(instance=gpu).initial.items() if value is not None}
    data.update(host=gpu.host_id, status="in_service")
    url = f"/gpus/{gpu.uuid}/edit/"
    refused = client_for(admin).post(url, data)
    assert refused.status_code == 400 and "diagnostic" in refused.content.decode()
    no_reason = client_for(admin).post(url, {**data, "force_return": "on"})
    assert no_reason.status_code == 400 and "Say why" in no_reason.content.decode()
    gpu.refresh_from_db()
    assert gpu.status == "out_for_repair"
    forced = client_for(admin).post(url, {**data, "force_return": "on", "force_reason": "Vendor-tested"})
    assert forced.status_code == 302, forced.content
    row = history(gpu)[-1]
    assert (row.to_status, row.override, row.reason) == ("in_service", True, "Vendor-tested")


def test_data_migration_initial_rows():
    """The migration's function: one row per existing GPU, as of its registration."""
    import importlib

    from django.apps import apps
    from django.db import connection

    migration = importlib.import_module("portal.fleet.migrations.0004_gpu_status_history")
    gpu = GpuFactory(status="retired")

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection
    migration.initial_rows(apps, editor)
    (row,) = history(gpu)
    assert (row.from_status, row.to_status, row.source) == ("", "retired", "registration")
    assert row.changed_at == gpu.created_at


def test_gpu_page_shows_the_status_intervals(client_for, technician, admin, viewer, gpu):
    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, reason="fans dead", source=Source.API)
    services.gpu_status_set(gpu=gpu, status="in_service", user=admin, reason="swapped", source=Source.API, force=True)
    html = client_for(viewer).get(gpu.get_absolute_url()).content.decode()
    assert "Status history" in html and "fans dead" in html and "admin override" in html


def test_django_admin_refuses_a_return_to_service_without_a_diagnostic_on_its_form(client_for, admin, gpu):
    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=admin, source=Source.API)
    page = client_for(admin).get(f"/admin/fleet/gpu/{gpu.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data.update(status="in_service")
    answer = client_for(admin).post(f"/admin/fleet/gpu/{gpu.pk}/change/", data)
    assert answer.status_code == 200 and "diagnostic" in answer.content.decode()
    gpu.refresh_from_db()
    assert gpu.status == "out_for_repair"
