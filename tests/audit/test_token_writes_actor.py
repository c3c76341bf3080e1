"""Writes made with a personal API token are credited to the token's user in the audit trail (and
listed under that user on the audit page), never to "an agent"."""

import datetime as dt
import io
import json

import pytest
from auditlog.models import LogEntry
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image

from portal.accounts.services import api_token_issue
from portal.checklists.models import ChecklistAnswer, ChecklistPhoto, ChecklistRun
from portal.fleet.models import Gpu, MaintenanceRecord
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

CLEANING_ANSWERS = [
    {"item": "dust_level", "value": "heavy"},
    {"item": "filters", "value": True},
    {"item": "fans_spin", "value": "pass"},
    {"item": "airflow_path", "value": "pass"},
    {"item": "heatsink_fins", "value": "pass"},
]


@pytest.fixture
def token_client(technician):
    secret, _ = api_token_issue(user=technician)
    return Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {secret}")


@pytest.fixture
def host(db):
    host = HostFactory(hostname="node-a")
    GpuFactory(host=host, index=0, uuid="GPU-a0")
    return host


def post(client, path, body):
    return client.post("/api/v1" + path, json.dumps(body), content_type="application/json")


def entries_for(model, pk=None):
    entries = LogEntry.objects.get_for_model(model)
    return entries.filter(object_pk=str(pk)) if pk is not None else entries


def assert_all_by(entries, user):
    entries = list(entries)
    assert entries, "no audit entry written"
    assert {entry.actor_id for entry in entries} == {user.pk}, [(e, e.actor_id) for e in entries]


def test_record_create_with_token(token_client, technician, host):
    body = {"kind": "cleaning", "host": "node-a", "performed_at": "2026-01-01T00:00:00Z", "performed_by": "bob",
            "dust_level": "light"}  # fmt: skip
    response = post(token_client, "/records", body)
    assert response.status_code == 201, response.content
    assert_all_by(entries_for(MaintenanceRecord, response.json()["id"]), technician)


def test_gpu_patch_with_token(token_client, technician, host):
    response = token_client.patch("/api/v1/gpus/GPU-a0", json.dumps({"notes": "reseated"}),
                                  content_type="application/json")  # fmt: skip
    assert response.status_code == 200, response.content
    assert_all_by(entries_for(Gpu, Gpu.objects.get(uuid="GPU-a0").pk).filter(action=LogEntry.Action.UPDATE),
                  technician)  # fmt: skip


def test_diagnostic_requested_with_token(token_client, technician, host):
    from portal.diagnostics.models import Diagnostic

    response = post(token_client, "/hosts/node-a/diagnostics", {"level": 1})
    assert response.status_code == 201, response.content
    diagnostic = Diagnostic.objects.get(pk=response.json()["id"])
    assert diagnostic.requested_by == technician and response.json()["requested_by"] == technician.username
    assert_all_by(entries_for(Diagnostic, diagnostic.pk), technician)


def test_checklist_run_answer_photo_complete_abandon_with_token(token_client, technician, host, media_root):
    run = post(token_client, "/checklists/runs", {"template": "cleaning", "host": "node-a"}).json()
    answered = post(token_client, f"/checklists/runs/{run['id']}/answers", {"answers": CLEANING_ANSWERS})
    assert answered.status_code == 200, answered.content
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, "PNG")
    photo = token_client.post(
        f"/api/v1/checklists/runs/{run['id']}/photos",
        {"item": "photo_before", "file": SimpleUploadedFile("a.png", buffer.getvalue())},
    )
    assert photo.status_code == 201, photo.content
    done = post(token_client, f"/checklists/runs/{run['id']}/complete", {"signature": "Bob Tech"})
    assert done.status_code == 200, done.content
    other = post(token_client, "/checklists/runs", {"template": "cleaning", "host": "node-a"}).json()
    abandoned = post(token_client, f"/checklists/runs/{other['id']}/abandon", {"reason": "wrong host"})
    assert abandoned.status_code == 200, abandoned.content

    assert_all_by(entries_for(ChecklistRun), technician)
    assert_all_by(entries_for(ChecklistAnswer), technician)
    assert_all_by(entries_for(ChecklistPhoto), technician)
    assert_all_by(entries_for(MaintenanceRecord, done.json()["records"][0]), technician)


def test_audit_page_lists_token_writes_under_the_user(token_client, technician, host, client_for, viewer):
    body = {"kind": "cleaning", "host": "node-a", "performed_at": "2026-01-01T00:00:00Z", "performed_by": "bob",
            "dust_level": "light"}  # fmt: skip
    record_id = post(token_client, "/records", body).json()["id"]
    entry = entries_for(MaintenanceRecord, record_id).get()
    by_user = client_for(viewer).get("/audit/", {"actor": technician.username})
    assert entry.pk in [e.pk for e in by_user.context["page"].object_list]
    by_agents = client_for(viewer).get("/audit/", {"actor": "-"})
    assert entry.pk not in [e.pk for e in by_agents.context["page"].object_list]


def test_bad_token_writes_nothing(host):
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION="Token gfu_not-a-token")
    response = post(client, "/records", {"kind": "cleaning", "host": "node-a", "performed_by": "x"})
    assert response.status_code == 401
    assert not entries_for(MaintenanceRecord).exists()


def test_ticket_state_change_with_token(token_client, technician, host):
    """Tickets keep their own history (TicketEvent, not django-auditlog): the change is the token user's."""
    from django.utils import timezone

    from portal.maintenance.models import TicketEvent
    from portal.maintenance.services.tickets import ticket_fire

    ticket, _ = ticket_fire(rule="overheat", host_id=host.pk, gpu_id=host.gpus.get().pk, at=timezone.now(), value=90)
    response = post(token_client, f"/tickets/{ticket.pk}/state", {"state": "acknowledged"})
    assert response.status_code == 200, response.content
    assert TicketEvent.objects.get(ticket=ticket, kind=TicketEvent.Kind.STATE).user == technician


def test_enrolment_codes_made_and_revoked_with_a_token(admin):
    from portal.enrolment.models import EnrolmentCode

    secret, _ = api_token_issue(user=admin)
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {secret}")
    made = post(client, "/enrolments", {"hostname": "gpu-new-01"})
    assert made.status_code == 201, made.content
    code_id = made.json()["id"]
    assert client.delete(f"/api/v1/enrolments/{code_id}").status_code == 204
    assert_all_by(entries_for(EnrolmentCode, code_id), admin)


RUNS = "test_checklist_run_answer_photo_complete_abandon_with_token"
# Writes made without a personal token by design: the agents' ingest (a host token) and the
# enrolment exchange (the code is the credential; its audit row names the address and code).
# Agents' endpoints: they take host tokens (or an enrolment code), never a person's.
NO_PERSONAL_TOKEN = {
    ("post", "/api/v1/ingest"), ("post", "/api/v1/enrol"), ("post", "/api/v1/host-tokens/rotate"),
    ("post", "/api/v1/diagnostics/{id}/result"), ("post", "/api/v1/prometheus/write"),
}  # fmt: skip
# Each write endpoint of /api/v1 and the test above (or elsewhere) that makes it with a token.
TOKEN_WRITE_TESTS = {
    ("post", "/api/v1/records"): "test_record_create_with_token",
    ("patch", "/api/v1/gpus/{uuid}"): "test_gpu_patch_with_token",
    ("post", "/api/v1/tickets/{ticket_id}/state"): "test_ticket_state_change_with_token",
    ("post", "/api/v1/checklists/runs"): RUNS,
    ("post", "/api/v1/checklists/runs/{run_id}/answers"): RUNS,
    ("post", "/api/v1/checklists/runs/{run_id}/photos"): RUNS,
    ("post", "/api/v1/checklists/runs/{run_id}/complete"): RUNS,
    ("post", "/api/v1/checklists/runs/{run_id}/abandon"): RUNS,
    # Against a real Slurm cluster: tests/scheduler/test_scheduler_api.py.
    ("post", "/api/v1/hosts/{hostname}/scheduler/drain"): "test_token_drain_and_resume_are_the_token_users",
    ("post", "/api/v1/hosts/{hostname}/scheduler/resume"): "test_token_drain_and_resume_are_the_token_users",
    ("post", "/api/v1/enrolments"): "test_enrolment_codes_made_and_revoked_with_a_token",
    ("post", "/api/v1/hosts/{hostname}/diagnostics"): "test_diagnostic_requested_with_token",
    ("delete", "/api/v1/enrolments/{code_id}"): "test_enrolment_codes_made_and_revoked_with_a_token",
    ("post", "/api/v1/maintenance-windows"): "test_maintenance_windows_with_a_token",
    ("post", "/api/v1/maintenance-windows/{window_id}/complete"): "test_maintenance_windows_with_a_token",
    ("post", "/api/v1/maintenance-windows/{window_id}/cancel"): "test_maintenance_windows_with_a_token",
    ("post", "/api/v1/parts"): "test_parts_and_movements_with_a_token",
    ("post", "/api/v1/parts/{part_id}/movements"): "test_parts_and_movements_with_a_token",
    ("post", "/api/v1/warranties"): "test_warranty_with_a_token",
    ("post", "/api/v1/rma-cases"): "test_rma_case_with_a_token",
    ("post", "/api/v1/rma-cases/{case_id}/transition"): "test_rma_case_with_a_token",
    ("post", "/api/v1/ingest-sources"): "test_ingest_sources_with_a_token",
    ("delete", "/api/v1/ingest-sources/{source_id}"): "test_ingest_sources_with_a_token",
}


def test_every_write_endpoint_has_a_token_test():
    """A new write endpoint must get a test here that makes it with a token and checks the actor
    (the agents' ingest takes host tokens, not personal ones)."""
    from pathlib import Path

    from portal.api import api

    schema = api.get_openapi_schema()
    writes = {
        (method, path)
        for path, operations in schema["paths"].items()
        for method in operations
        if method in ("post", "put", "patch", "delete") and (method, path) not in NO_PERSONAL_TOKEN
    }
    assert writes == set(TOKEN_WRITE_TESTS)
    sources = Path(__file__).read_text() + (Path(__file__).parents[1] / "scheduler/test_scheduler_api.py").read_text()
    assert all(f"def {name}(" in sources for name in TOKEN_WRITE_TESTS.values())


def test_maintenance_windows_with_a_token(token_client, technician, host):
    from django.utils import timezone

    from portal.windows.models import MaintenanceWindow

    start = timezone.now() + dt.timedelta(days=1)
    ids = []
    for title in ("Fans", "Risers"):
        made = post(token_client, "/maintenance-windows", {
            "title": title, "starts_at": start.isoformat(), "ends_at": (start + dt.timedelta(hours=1)).isoformat(),
            "hosts": ["node-a"],
        })  # fmt: skip
        assert made.status_code == 201, made.content
        ids.append(made.json()["id"])
        start += dt.timedelta(hours=2)
    assert post(token_client, f"/maintenance-windows/{ids[0]}/cancel", {}).status_code == 200
    MaintenanceWindow.objects.filter(pk=ids[1]).update(state=MaintenanceWindow.State.ACTIVE)
    completed = post(token_client, f"/maintenance-windows/{ids[1]}/complete", {})
    assert completed.status_code == 200, completed.content
    for window_id in ids:
        assert_all_by(entries_for(MaintenanceWindow, window_id), technician)


def test_parts_and_movements_with_a_token(token_client, technician):
    from portal.inventory.models import Part, StockMovement

    made = post(token_client, "/parts", {"name": "Fan 80 mm", "kind": "fan", "reorder_at": 1})
    assert made.status_code == 201, made.content
    part_id = made.json()["id"]
    moved = post(token_client, f"/parts/{part_id}/movements", {"delta": 4, "reason": "received"})
    assert moved.status_code == 201, moved.content
    assert_all_by(entries_for(Part, part_id), technician)
    assert_all_by(entries_for(StockMovement, moved.json()["id"]), technician)


def test_warranty_with_a_token(admin, host):
    from portal.inventory.models import Warranty

    secret, _ = api_token_issue(user=admin)
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {secret}")
    made = post(client, "/warranties", {
        "vendor": "Dell", "contract": "PS-1", "coverage": "parts", "starts_on": "2026-01-01",
        "ends_on": "2029-01-01", "hosts": ["node-a"],
    })  # fmt: skip
    assert made.status_code == 201, made.content
    assert_all_by(entries_for(Warranty, made.json()["id"]), admin)


def test_rma_case_with_a_token(token_client, technician, host):
    from portal.inventory.models import RmaCase

    made = post(token_client, "/rma-cases", {"gpu": "GPU-a0", "vendor": "NVIDIA", "case_number": "RMA-9"})
    assert made.status_code == 201, made.content
    case_id = made.json()["id"]
    moved = post(token_client, f"/rma-cases/{case_id}/transition", {"state": "shipped", "tracking": "1Z999"})
    assert moved.status_code == 200, moved.content
    assert_all_by(entries_for(RmaCase, case_id), technician)


def test_ingest_sources_with_a_token(admin):
    from portal.remote_write.models import IngestSource

    secret, _ = api_token_issue(user=admin)
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {secret}")
    made = post(client, "/ingest-sources", {"name": "lab-prometheus", "hosts": "gpu-*"})
    assert made.status_code == 201, made.content
    source_id = made.json()["id"]
    assert client.delete(f"/api/v1/ingest-sources/{source_id}").status_code in (200, 204)
    assert_all_by(entries_for(IngestSource, source_id), admin)
