"""The audit trail: who changed which field from what to what, on the object's page and in /audit/."""

import datetime as dt

import pytest
from auditlog.models import LogEntry
from django.utils import timezone

from portal.fleet import services
from portal.fleet.models import Gpu, Host, MaintenanceRecord
from tests.core.pages import field_errors, form_data
from tests.factories import GpuFactory, HostFactory, RecordFactory

pytestmark = pytest.mark.django_db

Action = LogEntry.Action


def only_entry(model, pk, action):
    entries = LogEntry.objects.filter(content_type__model=model._meta.model_name, object_pk=str(pk), action=action)
    assert entries.count() == 1, list(entries.values("action", "changes"))
    return entries.get()


def changes(entry):
    return {field: tuple(change) for field, change in entry.changes_dict.items()}


def test_host_create_update_delete_through_pages(client_for, admin):
    client = client_for(admin)
    response = client.post("/hosts/new/", {"hostname": "dgx-09", "rack": "R1", "status": "active"})
    assert response.status_code == 302
    host = Host.objects.get(hostname="dgx-09")
    created = only_entry(Host, host.pk, Action.CREATE)
    assert created.actor == admin
    assert changes(created)["hostname"][1] == "dgx-09"

    response = client.post("/hosts/dgx-09/edit/", {"hostname": "dgx-09", "rack": "R7", "status": "retired"})
    assert response.status_code == 302
    updated = only_entry(Host, host.pk, Action.UPDATE)
    assert updated.actor == admin
    assert changes(updated) == {"rack": ("R1", "R7"), "status": ("active", "retired")}

    page = client.get("/hosts/dgx-09/").content.decode()
    assert '<span class="change-field">Rack</span>: R1 → R7' in page
    assert "alice" in page

    assert client.post("/hosts/dgx-09/delete/").status_code == 302
    assert not Host.objects.filter(pk=host.pk).exists()
    deleted = only_entry(Host, host.pk, Action.DELETE)
    assert (deleted.actor, deleted.object_repr) == (admin, "dgx-09")


def test_gpu_create_update_delete_through_pages(client_for, admin):
    client = client_for(admin)
    host = HostFactory(hostname="dgx-01")
    data = {"uuid": "GPU-abc", "host": host.pk, "index": 0, "status": "in_service", "memory_total_mib": "81920"}
    assert client.post("/gpus/new/", data).status_code == 302
    gpu = Gpu.objects.get(uuid="GPU-abc")
    assert only_entry(Gpu, gpu.pk, Action.CREATE).actor == admin

    assert client.post("/gpus/GPU-abc/edit/", {**data, "status": "out_for_repair", "serial": "S1"}).status_code == 302
    updated = only_entry(Gpu, gpu.pk, Action.UPDATE)
    assert updated.actor == admin
    assert changes(updated) == {"status": ("in_service", "out_for_repair"), "serial": ("", "S1")}
    page = client.get("/gpus/GPU-abc/").content.decode()
    assert '<span class="change-field">Status</span>: In service → Out for repair' in page

    assert client.post("/gpus/GPU-abc/delete/").status_code == 302
    assert only_entry(Gpu, gpu.pk, Action.DELETE).actor == admin


def test_record_create_update_delete_through_pages(client_for, technician, admin):
    gpu = GpuFactory()
    values = {"performed_at": timezone.now() - dt.timedelta(hours=2), "performed_by": "Li Wei", "dust_level": "light"}
    response = client_for(technician).post(f"/gpus/{gpu.uuid}/records/new/?kind=cleaning", form_data(values))
    assert response.status_code == 302
    record = MaintenanceRecord.objects.get()
    assert only_entry(MaintenanceRecord, record.pk, Action.CREATE).actor == technician

    response = client_for(technician).post(f"/records/{record.pk}/edit/", form_data({**values, "dust_level": "heavy"}))
    assert response.status_code == 302
    updated = only_entry(MaintenanceRecord, record.pk, Action.UPDATE)
    assert updated.actor == technician
    assert changes(updated)["dust_level"] == ("light", "heavy")
    page = client_for(technician).get(f"/records/{record.pk}/").content.decode()
    assert '<span class="change-field">Dust level</span>: Light → Heavy' in page and "bob" in page

    assert client_for(admin).post(f"/records/{record.pk}/delete/").status_code == 302
    deleted = only_entry(MaintenanceRecord, record.pk, Action.DELETE)
    assert deleted.actor == admin

    log = client_for(admin).get("/audit/", {"model": "record", "action": "delete"})
    assert log.status_code == 200
    assert [e.pk for e in log.context["page"].object_list] == [deleted.pk]
    assert deleted.object_repr in log.content.decode()


def test_changes_made_outside_a_request_have_no_actor(client_for, viewer):
    host = services.host_create(hostname="agent-made")
    entry = only_entry(Host, host.pk, Action.CREATE)
    assert entry.actor is None
    page = client_for(viewer).get("/hosts/agent-made/").content.decode()
    assert "agent / system" in page
    log = client_for(viewer).get("/audit/", {"actor": "-"})
    assert [e.pk for e in log.context["page"].object_list] == [entry.pk]


@pytest.fixture
def history(client_for, admin, technician):
    """A host and GPU made by alice, a record made by bob, one of them back-dated a week."""
    alice, bob = client_for(admin), client_for(technician)
    alice.post("/hosts/new/", {"hostname": "dgx-01", "status": "active"})
    alice.post("/hosts/new/", {"hostname": "ws-lab-03", "status": "active"})
    host = Host.objects.get(hostname="dgx-01")
    alice.post("/gpus/new/", {"uuid": "GPU-1", "host": host.pk, "index": 0, "status": "in_service"})
    values = {"performed_at": timezone.now() - dt.timedelta(hours=2), "performed_by": "x", "dust_level": "none"}
    bob.post("/gpus/GPU-1/records/new/?kind=cleaning", form_data(values))
    alice.post("/hosts/ws-lab-03/edit/", {"hostname": "ws-lab-03", "status": "retired"})
    old = LogEntry.objects.get(object_repr="ws-lab-03", action=Action.CREATE)
    LogEntry.objects.filter(pk=old.pk).update(timestamp=timezone.now() - dt.timedelta(days=7))
    # alice's and bob's sign-ins are in the trail too (tests/accounts/test_account_events.py): not these tests' subject.
    LogEntry.objects.filter(content_type__app_label="accounts", content_type__model="accountevent").delete()
    assert LogEntry.objects.count() == 5
    return LogEntry.objects


def listed(response):
    assert response.status_code == 200, response.content.decode()[:2000]
    return {(e.content_type.model, e.get_action_display().lower(), e.object_repr) for e in response.context["page"]}


def test_log_lists_everything_newest_first(history, client_for, viewer):
    client = client_for(viewer)
    history.filter(content_type__model="accountevent").delete()  # charlie's sign-in just now
    response = client.get("/audit/")
    entries = list(response.context["page"])
    assert len(entries) == 5
    assert [e.timestamp for e in entries] == sorted((e.timestamp for e in entries), reverse=True)
    assert "5 entries" in response.content.decode()


DGX_NEW = ("host", "create", "dgx-01")
LAB_NEW = ("host", "create", "ws-lab-03")
LAB_RETIRED = ("host", "update", "ws-lab-03")
FILTERS = [
    ({"model": "host"}, {DGX_NEW, LAB_NEW, LAB_RETIRED}),
    ({"model": "gpu"}, {("gpu", "create", "dgx-01 #0")}),
    ({"action": "update"}, {LAB_RETIRED}),
    ({"actor": "bob"}, None),
    ({"query": "LAB"}, {LAB_NEW, LAB_RETIRED}),
    ({"model": "host", "action": "create", "actor": "alice"}, {DGX_NEW, LAB_NEW}),
    ({"until": "DAYS:-3"}, {LAB_NEW}),
    ({"since": "DAYS:-3", "model": "host"}, {DGX_NEW, LAB_RETIRED}),
    ({"since": "DAYS:-7", "until": "DAYS:0", "model": "host", "query": "ws"}, {LAB_NEW, LAB_RETIRED}),
    ({"since": "DAYS:1"}, set()),
]


def resolve(params):
    today = timezone.localdate()
    return {
        k: (today + dt.timedelta(days=int(v[5:]))).isoformat() if v.startswith("DAYS:") else v
        for k, v in params.items()
    }


@pytest.mark.parametrize(("params", "want"), FILTERS, ids=[str(f[0]) for f in FILTERS])
def test_log_filters(params, want, history, client_for, viewer):
    got = listed(client_for(viewer).get("/audit/", resolve(params)))
    if want is None:  # bob's cleaning: its repr has a timestamp in it
        assert len(got) == 1 and next(iter(got))[:2] == ("maintenancerecord", "create")
    else:
        assert got == want


BAD_FILTERS = [
    ({"model": "toaster"}, "model"),
    ({"action": "explode"}, "action"),
    ({"actor": "nobody"}, "actor"),
    ({"since": "2026-05-02", "until": "2026-05-01"}, "until"),
    ({"since": "yesterday"}, "since"),
]


@pytest.mark.parametrize(("params", "field"), BAD_FILTERS, ids=[f for _, f in BAD_FILTERS])
def test_log_rejects_bad_filters(params, field, history, client_for, viewer):
    response = client_for(viewer).get("/audit/", params)
    assert response.status_code == 400
    assert field_errors(response, field), response.content.decode()[:3000]
    assert "entries" not in response.content.decode()


def test_log_pages(client_for, viewer):
    for number in range(55):
        HostFactory(hostname=f"bulk-{number:02d}")
    client = client_for(viewer)
    first = client.get("/audit/", {"model": "host"})
    assert len(first.context["page"]) == 50
    assert 'href="?model=host&page=2"' in first.content.decode()
    second = client.get("/audit/", {"model": "host", "page": 2})
    assert len(second.context["page"]) == 5


def test_deleted_gpu_with_record_history_stays_in_log(client_for, admin):
    record = RecordFactory()
    services.record_delete(record=record)
    services.gpu_delete(gpu=record.gpu)
    listed_models = listed(client_for(admin).get("/audit/", {"action": "delete"}))
    assert {m for m, _, _ in listed_models} == {"maintenancerecord", "gpu"}


def test_create_entries_list_only_the_objects_own_fields():
    record = RecordFactory()
    for obj in (record.host, record.gpu, record):
        entry = only_entry(type(obj), obj.pk, Action.CREATE)
        own = {f.name for f in type(obj)._meta.concrete_fields}
        assert set(entry.changes_dict) <= own, set(entry.changes_dict) - own
        assert {"gpus", "records", "attachments"}.isdisjoint(entry.changes_dict)
