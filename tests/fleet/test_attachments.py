"""Attachments on maintenance records: what is accepted, what is refused, and who may download."""

import datetime as dt

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.utils import timezone

from portal.core.errors import InvalidInput
from portal.fleet import services
from portal.fleet.models import Attachment, MaintenanceRecord
from tests.core.pages import field_errors, form_data
from tests.factories import GpuFactory, RecordFactory

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))
PDF = b"%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n"
TEXT = "nvidia-smi: all fans at 30 %, 42 °C\n".encode()


def upload(name, content, content_type="application/octet-stream"):
    return SimpleUploadedFile(name, content, content_type=content_type)


def cleaning_values():
    return {"performed_at": timezone.now() - dt.timedelta(hours=1), "performed_by": "Li Wei", "dust_level": "light"}


def files_under(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


ACCEPTED = [
    ("heatsink.png", PNG, "image/png"),
    ("RMA form.PDF", PDF, "application/pdf"),
    ("nvidia-smi.log", TEXT, "text/plain"),
    ("readings.csv", b"time,temp\n1,42\n", "text/csv"),
    ("photo.jpg", b"\xff\xd8\xff\xe0" + bytes(32), "image/jpeg"),
]


def test_service_stores_accepted_files(media_root, technician):
    gpu = GpuFactory()
    uploads = [upload(name, content) for name, content, _ in ACCEPTED]
    record = services.record_create(
        kind="cleaning", host=gpu.host, gpu=gpu, recorded_by=technician, attachments=uploads, **cleaning_values()
    )
    stored = {a.original_name: a for a in record.attachments.all()}
    assert set(stored) == {name for name, _, _ in ACCEPTED}
    for name, content, content_type in ACCEPTED:
        attachment = stored[name]
        assert (attachment.content_type, attachment.size_bytes) == (content_type, len(content))
        assert attachment.uploaded_by == technician
        with attachment.file.open("rb") as handle:
            assert handle.read() == content
        assert (media_root / attachment.file.name).is_file()


REJECTED = [
    ("wrong-extension", "driver.exe", b"MZ\x90\x00", "type not accepted"),
    ("no-extension", "README", b"hello", "type not accepted"),
    ("text-as-png", "heatsink.png", b"this is not a picture", "not a PNG file"),
    ("png-as-pdf", "invoice.pdf", PNG, "not a PDF file"),
    ("not-utf8", "dmesg.log", "température élevée".encode("latin-1"), "must be UTF-8"),
    ("binary-as-text", "dump.txt", b"abc\x00def", "not a text file"),
    ("empty", "empty.txt", b"", "empty"),
]


@pytest.mark.parametrize(("name", "content", "message"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_service_rejects_bad_file_and_writes_nothing(name, content, message, media_root, technician):
    gpu = GpuFactory()
    with pytest.raises(InvalidInput) as caught:
        services.record_create(
            kind="cleaning",
            host=gpu.host,
            gpu=gpu,
            recorded_by=technician,
            attachments=[upload("fine.png", PNG), upload(name, content)],
            **cleaning_values(),
        )
    errors = caught.value.field_errors["attachments"]
    assert any(message in e and name in e for e in errors), errors
    assert MaintenanceRecord.objects.count() == 0
    assert Attachment.objects.count() == 0
    assert files_under(media_root) == []


def test_service_rejects_too_large_file(media_root):
    gpu = GpuFactory()
    with override_settings(ATTACHMENT_MAX_BYTES=1024), pytest.raises(InvalidInput) as caught:
        services.record_create(
            kind="cleaning", host=gpu.host, gpu=gpu, attachments=[upload("big.log", b"x" * 1025)], **cleaning_values()
        )
    assert "larger than" in caught.value.field_errors["attachments"][0]
    assert MaintenanceRecord.objects.count() == 0
    assert files_under(media_root) == []
    with override_settings(ATTACHMENT_MAX_BYTES=1024):
        record = services.record_create(
            kind="cleaning", host=gpu.host, gpu=gpu, attachments=[upload("ok.log", b"x" * 1024)], **cleaning_values()
        )
    assert record.attachments.get().size_bytes == 1024


def test_update_with_bad_file_leaves_record_unchanged(media_root):
    record = RecordFactory(notes="before")
    with pytest.raises(InvalidInput):
        services.record_update(record=record, notes="after", attachments=[upload("x.png", b"GIF89a")])
    record.refresh_from_db()
    assert record.notes == "before"
    assert not record.attachments.exists()
    assert files_under(media_root) == []


def test_page_accepts_several_files(media_root, client_for, technician):
    gpu = GpuFactory()
    data = {**form_data(cleaning_values()), "attachments": [upload("a.png", PNG), upload("b.pdf", PDF)]}
    response = client_for(technician).post(f"/gpus/{gpu.uuid}/records/new/?kind=cleaning", data)
    assert response.status_code == 302
    record = MaintenanceRecord.objects.get()
    assert sorted(record.attachments.values_list("original_name", flat=True)) == ["a.png", "b.pdf"]
    assert len(files_under(media_root)) == 2
    page = client_for(technician).get(record.get_absolute_url())
    assert "a.png" in page.content.decode()


@pytest.mark.parametrize(("name", "content", "message"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_page_rejects_bad_file_beside_the_field(name, content, message, media_root, client_for, technician):
    gpu = GpuFactory()
    data = {**form_data(cleaning_values()), "attachments": [upload(name, content)]}
    response = client_for(technician).post(f"/gpus/{gpu.uuid}/records/new/?kind=cleaning", data)
    assert response.status_code == 400
    errors = field_errors(response, "attachments")
    # An empty upload is refused by Django's own FileField before the service sees it.
    assert errors and (message in errors[0] or name == "empty.txt"), errors
    assert MaintenanceRecord.objects.count() == 0
    assert files_under(media_root) == []


def test_page_rejects_too_large_file(media_root, client_for, technician):
    gpu = GpuFactory()
    data = {**form_data(cleaning_values()), "attachments": [upload("big.log", b"y" * 2048)]}
    with override_settings(ATTACHMENT_MAX_BYTES=2047):
        response = client_for(technician).post(f"/gpus/{gpu.uuid}/records/new/?kind=cleaning", data)
    assert response.status_code == 400
    assert "larger than" in field_errors(response, "attachments")[0]
    assert MaintenanceRecord.objects.count() == 0
    assert files_under(media_root) == []


@pytest.fixture
def attachment(media_root, technician):
    gpu = GpuFactory()
    record = services.record_create(
        kind="cleaning", host=gpu.host, gpu=gpu, attachments=[upload("heatsink.png", PNG)], **cleaning_values()
    )
    return record.attachments.get()


@pytest.mark.parametrize("role", ["admin", "technician", "viewer"])
def test_download_for_every_role(role, attachment, actors, client_for):
    response = client_for(actors[role]).get(f"/attachments/{attachment.pk}/")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == PNG
    assert response["Content-Type"] == "image/png"
    assert 'attachment; filename="heatsink.png"' in response["Content-Disposition"]
    assert response["X-Content-Type-Options"] == "nosniff"


def test_download_needs_the_view_permission(attachment, outsider, client_for):
    assert client_for(outsider).get(f"/attachments/{attachment.pk}/").status_code == 403


def test_download_needs_login(attachment, client_for):
    url = f"/attachments/{attachment.pk}/"
    response = client_for().get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={url}"


def test_download_of_missing_attachment_is_404(viewer, client_for):
    assert client_for(viewer).get("/attachments/999999/").status_code == 404


def test_record_delete_removes_files_after_commit(attachment, media_root, django_capture_on_commit_callbacks):
    assert files_under(media_root)
    with django_capture_on_commit_callbacks(execute=True):
        services.record_delete(record=attachment.record)
    assert not MaintenanceRecord.objects.exists()
    assert files_under(media_root) == []
