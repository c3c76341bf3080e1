"""The checklists API as the contract says: templates, start, answers, photos, complete, abandon,
list and detail; 400 naming the item, 409 on a closed run, 403 for viewers, nothing stored when refused."""

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from PIL import Image

from portal.checklists.models import ChecklistAnswer, ChecklistPhoto, ChecklistRun, ChecklistTemplate
from portal.fleet.models import Gpu, GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from portal.maintenance.services.tickets import ticket_fire

pytestmark = pytest.mark.django_db

SHIPPED = {
    "cleaning": "cleaning", "connection_check": "connection_check", "driver_update": "driver_update",
    "backup_verification": "backup", "pre_training": "inspection", "repair_return": "repair",
}  # fmt: skip

CLEANING_ANSWERS = [
    {"item": "dust_level", "value": "heavy"},
    {"item": "filters", "value": True},
    {"item": "fans_spin", "value": "pass"},
    {"item": "airflow_path", "value": "pass", "note": "re-routed a cable"},
    {"item": "heatsink_fins", "value": "pass"},
]


def start(call, template="cleaning", **extra):
    response = call("post", "/runs", {"template": template, "host": "node-a", **extra})
    assert response.status_code == 201, response.content
    return response.json()


def png(size=(4, 4)):
    buffer = io.BytesIO()
    Image.new("RGB", size, "red").save(buffer, "PNG")
    return buffer.getvalue()


def test_shipped_templates_with_the_contract_keys(api, viewer):
    response = api(viewer)("get", "/templates")
    assert response.status_code == 200
    data = response.json()
    assert data["count"] == len(data["items"]) >= 6
    templates = {t["key"]: t for t in data["items"]}
    assert {k: templates[k]["record_kind"] for k in SHIPPED} == SHIPPED
    for template in templates.values():
        assert template["applies_to"] in ("host", "gpu")
        for item in template["items"]:
            assert {"key", "label", "kind", "required", "unit", "min", "max", "options"} <= set(item)
            if item["kind"] in ("photo", "auto"):
                assert item["required"] is False
    kinds = {i["kind"] for t in templates.values() for i in t["items"]}
    assert kinds == {"check", "pass_fail", "number", "choice", "text", "photo", "auto"}


def test_start_answer_complete_writes_records_and_resolves_the_ticket(api, technician, host):
    gpu = host.gpus.get(index=0)
    due, _ = ticket_fire(rule="schedule_cleaning", host_id=host.pk, gpu_id=None, at=host.created_at)
    call = api(technician)
    run = start(call)
    assert run["state"] == "in_progress" and run["template"] == "cleaning" and run["host"] == "node-a"
    assert run["gpus"] == ["GPU-a0", "GPU-a1"]
    assert all(i["value"] is None and i["answered_by"] is None and i["answered_at"] is None for i in run["items"])

    response = call("post", f"/runs/{run['id']}/answers", {"answers": CLEANING_ANSWERS})
    assert response.status_code == 200, response.content
    items = {i["key"]: i for i in response.json()["items"]}
    assert items["dust_level"]["value"] == "heavy" and items["dust_level"]["answered_by"] == "bob"
    assert items["airflow_path"]["note"] == "re-routed a cable"

    response = call("post", f"/runs/{run['id']}/complete", {"signature": "Bob Builder"})
    assert response.status_code == 200, response.content
    done = response.json()
    assert done["state"] == "completed" and done["signature"] == "Bob Builder" and done["completed_by"] == "bob"
    assert done["completed_at"] and len(done["records"]) == 2
    records = MaintenanceRecord.objects.filter(pk__in=done["records"]).order_by("gpu__index")
    assert [r.gpu for r in records] == list(host.gpus.order_by("index"))
    assert all(r.kind == "cleaning" and r.dust_level == "heavy" and r.airflow_ok is True for r in records)
    assert all(r.recorded_by == technician and "re-routed a cable" in r.notes for r in records)
    due.refresh_from_db()
    assert due.state == "resolved" and due.resolved_by_record_id in done["records"]
    assert not Ticket.objects.filter(rule="checklist_failed").exists()
    assert gpu.records.count() == 1
    # Closed: every write is a 409, and stores nothing.
    before = ChecklistAnswer.objects.count()
    assert call("post", f"/runs/{run['id']}/answers", {"answers": CLEANING_ANSWERS[:1]}).status_code == 409
    assert call("post", f"/runs/{run['id']}/complete", {"signature": "x"}).status_code == 409
    assert call("post", f"/runs/{run['id']}/abandon", {"reason": "x"}).status_code == 409
    assert ChecklistAnswer.objects.count() == before


@pytest.mark.parametrize(
    "answer, loc",
    [
        ({"item": "dust_level", "value": "filthy"}, "answers.1.value"),
        ({"item": "filters", "value": "yes"}, "answers.1.value"),
        ({"item": "fans_spin", "value": True}, "answers.1.value"),
        ({"item": "nope", "value": 1}, "answers.1.item"),
        ({"item": "cooler_after", "value": "pass"}, "answers.1.item"),
        ({"item": "photo_before", "value": "x"}, "answers.1.item"),
    ],
)
def test_bad_answer_names_it_and_stores_nothing(api, technician, host, answer, loc):
    call = api(technician)
    run = start(call)
    response = call(
        "post", f"/runs/{run['id']}/answers", {"answers": [{"item": "heatsink_fins", "value": "pass"}, answer]}
    )
    assert response.status_code == 400
    assert [d["loc"] for d in response.json()["detail"]] == [loc]
    assert not ChecklistAnswer.objects.exists()


def test_number_bounds_and_replacing_an_answer(api, technician, host):
    call = api(technician)
    run = start(call, template="pre_training")
    url = f"/runs/{run['id']}/answers"
    for bad in (30, 0, "2", True):
        response = call("post", url, {"answers": [{"item": "checkpoint_hours", "value": bad}]})
        assert response.status_code == 400 and response.json()["detail"][0]["loc"] == "answers.0.value", bad
    assert call("post", url, {"answers": [{"item": "checkpoint_hours", "value": 24}]}).status_code == 200
    response = call("post", url, {"answers": [{"item": "checkpoint_hours", "value": 2.5}]})
    items = {i["key"]: i for i in response.json()["items"]}
    assert items["checkpoint_hours"]["value"] == 2.5 and items["checkpoint_hours"]["unit"] == "h"
    assert ChecklistAnswer.objects.count() == 1


def test_complete_lists_each_missing_required_item(api, technician, host):
    call = api(technician)
    run = start(call)
    call("post", f"/runs/{run['id']}/answers", {"answers": CLEANING_ANSWERS[:2]})
    response = call("post", f"/runs/{run['id']}/complete", {"signature": "Bob"})
    assert response.status_code == 400
    locs = {d["loc"] for d in response.json()["detail"]}
    assert locs == {"items.fans_spin", "items.airflow_path", "items.heatsink_fins"}
    response = call("post", f"/runs/{run['id']}/complete", {"signature": "  "})
    assert "signature" in {d["loc"] for d in response.json()["detail"]}
    assert ChecklistRun.objects.get().state == "in_progress"
    assert not MaintenanceRecord.objects.exists()


def test_failed_item_opens_checklist_failed_ticket_naming_it(api, technician, host):
    call = api(technician)
    run = start(call, gpus=["GPU-a1"])
    answers = [a if a["item"] != "fans_spin" else {"item": "fans_spin", "value": "fail"} for a in CLEANING_ANSWERS]
    call("post", f"/runs/{run['id']}/answers", {"answers": answers})
    done = call("post", f"/runs/{run['id']}/complete", {"signature": "Bob"}).json()
    assert len(done["records"]) == 1
    ticket = Ticket.objects.get(rule="checklist_failed")
    assert ticket.gpu.uuid == "GPU-a1" and "Fans spin freely" in ticket.title
    assert f"/checklists/runs/{run['id']}/" in ticket.action


def test_start_bad_input_and_roles(api, actors, host):
    tech = api(actors["technician"])
    for body, loc in [
        ({"template": "nope", "host": "node-a"}, "template"),
        ({"template": "cleaning", "host": "nope"}, "host"),
        ({"template": "cleaning", "host": "node-a", "gpus": ["GPU-a0", "GPU-zz"]}, "gpus.1"),
        ({"template": "cleaning", "host": "node-a", "ticket": 999}, "ticket"),
        ({"host": "node-a"}, "template"),
    ]:
        response = tech("post", "/runs", body)
        assert response.status_code == 400 and loc in [d["loc"] for d in response.json()["detail"]], body
    assert api(actors["viewer"])("post", "/runs", {"template": "cleaning", "host": "node-a"}).status_code == 403
    assert api(actors["outsider"])("get", "/runs").status_code == 403
    assert api(None)("get", "/templates").status_code == 401
    assert not ChecklistRun.objects.exists()
    run = start(tech)
    viewer = api(actors["viewer"])
    assert viewer("get", f"/runs/{run['id']}").status_code == 200
    for path, body in [
        ("answers", {"answers": CLEANING_ANSWERS}),
        ("complete", {"signature": "x"}),
        ("abandon", {"reason": "x"}),
    ]:
        assert viewer("post", f"/runs/{run['id']}/{path}", body).status_code == 403
    assert not ChecklistAnswer.objects.exists()
    assert ChecklistRun.objects.get().state == "in_progress"
    assert tech("get", "/runs/99999").status_code == 404


def test_abandon_writes_no_record(api, technician, host):
    call = api(technician)
    run = start(call)
    assert call("post", f"/runs/{run['id']}/abandon", {"reason": ""}).json()["detail"][0]["loc"] == "reason"
    response = call("post", f"/runs/{run['id']}/abandon", {"reason": "wrong host"})
    assert response.status_code == 200 and response.json()["state"] == "abandoned"
    assert response.json()["abandoned_reason"] == "wrong host"
    assert not MaintenanceRecord.objects.exists()


def test_list_filters_and_detail(api, technician, host, django_assert_max_num_queries):
    call = api(technician)
    first = start(call)
    start(call, template="connection_check")
    call("post", f"/runs/{first['id']}/abandon", {"reason": "x"})
    assert call("get", "/runs").json()["count"] == 2
    assert [r["id"] for r in call("get", "/runs", {"state": "abandoned"}).json()["items"]] == [first["id"]]
    assert call("get", "/runs", {"template": "connection_check"}).json()["count"] == 1
    assert call("get", "/runs", {"host": "other"}).json()["count"] == 0
    assert call("get", "/runs", {"state": "bogus"}).status_code == 400
    for _ in range(5):
        start(call)
    with django_assert_max_num_queries(12):
        assert call("get", "/runs").json()["count"] == 7
    assert call("get", f"/runs/{first['id']}").json()["id"] == first["id"]


def test_photos_images_only_size_bound_signed_in_only(api, client_for, technician, viewer, host, media_root, settings):
    call = api(technician)
    run = start(call)
    client = client_for(technician)
    url = f"/api/v1/checklists/runs/{run['id']}/photos"
    response = client.post(url, {"item": "photo_before", "file": SimpleUploadedFile("a.png", png(), "image/png")})
    assert response.status_code == 201, response.content
    photo_url = response.json()["url"]
    for item, upload, loc in [
        ("photo_before", SimpleUploadedFile("a.png", b"not an image", "image/png"), "file"),
        (
            "photo_before",
            SimpleUploadedFile("a.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml"),
            "file",
        ),
        ("dust_level", SimpleUploadedFile("a.png", png(), "image/png"), "item"),
        ("nope", SimpleUploadedFile("a.png", png(), "image/png"), "item"),
    ]:
        response = client.post(url, {"item": item, "file": upload})
        assert response.status_code == 400 and response.json()["detail"][0]["loc"] == loc, item
    settings.CHECKLIST_PHOTO_MAX_BYTES = 50
    response = client.post(
        url, {"item": "photo_before", "file": SimpleUploadedFile("b.png", png((64, 64)), "image/png")}
    )
    assert response.status_code == 400 and response.json()["detail"][0]["loc"] == "file"
    assert ChecklistPhoto.objects.count() == 1
    viewer_client = client_for(viewer)
    assert (
        viewer_client.post(
            url, {"item": "photo_before", "file": SimpleUploadedFile("a.png", png(), "image/png")}
        ).status_code
        == 403
    )
    items = {i["key"]: i for i in call("get", f"/runs/{run['id']}").json()["items"]}
    assert items["photo_before"]["value"][0]["url"] == photo_url
    served = viewer_client.get(photo_url)
    assert served.status_code == 200 and served["Content-Type"] == "image/png"
    assert served["X-Content-Type-Options"] == "nosniff"
    anonymous = client_for(None).get(photo_url)
    assert anonymous.status_code in (302, 401, 403)
    assert len(list((media_root / "checklists").rglob("*.png"))) == 1


def test_repair_return_puts_the_gpu_back_in_service(api, technician, host):
    """With a diagnostic passed after the GPU went out for repair (tests/diagnostics has the run that
    requests one and waits for it)."""
    from portal.diagnostics.models import Diagnostic, DiagnosticGpu

    gpu = host.gpus.get(index=0)
    Gpu.objects.filter(pk=gpu.pk).update(status="out_for_repair")
    now = timezone.now()
    passed = Diagnostic.objects.create(
        host=host, level=1, state="passed", requested_at=now, expires_at=now, started_at=now, finished_at=now,
        result_at=now, tool="dcgmi",
    )  # fmt: skip
    DiagnosticGpu.objects.create(diagnostic=passed, gpu=gpu, result="pass")
    call = api(technician)
    run = start(call, template="repair_return", gpus=[gpu.uuid])
    answers = [
        {"item": "what_repaired", "value": "fan bearing"}, {"item": "vendor", "value": "ACME"},
        {"item": "outcome", "value": "fixed"}, {"item": "stress_test", "value": "pass"},
        {"item": "back_in_service", "value": True}, {"item": "cost", "value": 120.456},
        {"item": "downtime", "value": 48},
    ]  # fmt: skip
    assert call("post", f"/runs/{run['id']}/answers", {"answers": answers}).status_code == 200
    done = call("post", f"/runs/{run['id']}/complete", {"signature": "Bob"}).json()
    record = MaintenanceRecord.objects.get(pk=done["records"][0])
    assert record.kind == "repair" and record.vendor == "ACME" and str(record.cost) == "120.46"
    gpu.refresh_from_db()
    assert gpu.status == "in_service"
    change = GpuStatusChange.objects.filter(gpu=gpu).latest("changed_at")
    assert (change.from_status, change.to_status, change.source, change.changed_by) == (
        "out_for_repair",
        "in_service",
        "checklist",
        technician,
    )


def test_failed_repair_return_keeps_the_gpu_out(api, technician, host):
    gpu = host.gpus.get(index=0)
    Gpu.objects.filter(pk=gpu.pk).update(status="out_for_repair")
    call = api(technician)
    run = start(call, template="repair_return", gpus=[gpu.uuid])
    answers = [
        {"item": "what_repaired", "value": "fan"}, {"item": "vendor", "value": "ACME"},
        {"item": "outcome", "value": "fixed"}, {"item": "stress_test", "value": "fail"},
        {"item": "back_in_service", "value": False},
    ]  # fmt: skip
    call("post", f"/runs/{run['id']}/answers", {"answers": answers})
    assert call("post", f"/runs/{run['id']}/complete", {"signature": "Bob"}).status_code == 200
    gpu.refresh_from_db()
    assert gpu.status == "out_for_repair"
    assert Ticket.objects.filter(rule="checklist_failed", gpu=gpu).exists()


def test_host_template_writes_one_host_record(api, technician, host):
    call = api(technician)
    run = start(call, template="backup_verification")
    answers = [
        {"item": "content", "value": "both"}, {"item": "training_data", "value": True},
        {"item": "checkpoints", "value": True}, {"item": "restore_tested", "value": "pass"},
        {"item": "destination", "value": "nas01:/b"}, {"item": "size", "value": 812.5},
    ]  # fmt: skip
    call("post", f"/runs/{run['id']}/answers", {"answers": answers})
    done = call("post", f"/runs/{run['id']}/complete", {"signature": "Bob"}).json()
    record = MaintenanceRecord.objects.get(pk__in=done["records"])
    assert record.kind == "backup" and record.gpu is None and record.verified is True and float(record.size_gb) == 812.5


def test_template_edit_does_not_change_a_started_run(api, technician, host):
    call = api(technician)
    run = start(call)
    template = ChecklistTemplate.objects.get(key="cleaning")
    template.items.filter(key="filters").update(label="Changed")
    items = {i["key"]: i for i in call("get", f"/runs/{run['id']}").json()["items"]}
    assert items["filters"]["label"] == "Dust filters cleaned or replaced"


def test_in_openapi_with_every_status(client_for, viewer):
    paths = client_for(viewer).get("/api/v1/openapi.json").json()["paths"]
    answers = paths["/api/v1/checklists/runs/{run_id}/answers"]["post"]["responses"]
    assert {"200", "400", "403", "404", "409"} <= set(answers)
    assert "201" in paths["/api/v1/checklists/runs"]["post"]["responses"]
