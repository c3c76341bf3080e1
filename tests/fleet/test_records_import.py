"""CSV import of historical records: preview with per-row errors, then all rows or none."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from portal.fleet.models import MaintenanceRecord
from portal.fleet.record_input import records_import_csv
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

GOOD = (
    "kind,host,gpu,performed_at,performed_by,notes,dust_level,vendor,outcome,cost\n"
    "cleaning,node-a,,2019-05-01T10:00:00+02:00,Li Wei,paper log p.3,heavy,,,\n"
    "repair,node-a,{uuid},2020-01-10T00:00:00Z,ACME,,,ACME,fixed,120.50\n"
)


@pytest.fixture
def gpu():
    return GpuFactory(host=HostFactory(hostname="node-a"))


def upload(text):
    return SimpleUploadedFile("old.csv", text.encode(), content_type="text/csv")


def test_preview_writes_nothing_then_import_writes_all(client_for, technician, gpu):
    client = client_for(technician)
    text = GOOD.format(uuid=gpu.uuid)
    preview = client.post("/records/import/", {"file": upload(text)})
    assert preview.status_code == 200
    assert b"all good" in preview.content and b"Import 2 records" in preview.content
    assert MaintenanceRecord.objects.count() == 0
    done = client.post("/records/import/", {"csv_text": text, "confirm": "1"})
    assert done.status_code == 302
    assert MaintenanceRecord.objects.count() == 2
    repair = MaintenanceRecord.objects.get(kind="repair")
    assert str(repair.cost) == "120.50" and repair.gpu == gpu and repair.recorded_by == technician
    page = client.get("/records/")
    assert page.status_code == 200 and b"paper log p.3" in page.content


def test_one_bad_row_imports_nothing_and_names_the_errors(client_for, technician, gpu):
    text = GOOD.format(uuid=gpu.uuid) + "cleaning,node-zz,,2019-05-01T10:00:00Z,x,,moderate,,,\n"
    text += "cleaning,node-a,,2019-05-01T10:00:00,x,,dust,,,\n"
    response = client_for(technician).post("/records/import/", {"csv_text": text, "confirm": "1"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "node-zz" in body and "<code>host</code>" in body and "<code>performed_at</code>" in body
    assert MaintenanceRecord.objects.count() == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("kind,host,performed_at,colour\ncleaning,node-a,2019-01-01T00:00:00Z,red\n", "Unknown columns: colour"),
        ("kind,host\ncleaning,node-a\n", "Missing column 'performed_at'"),
        ("kind,host,performed_at\n", "No rows"),
        ("kind,host,performed_at,dust_level\ncleaning,node-a,2019-01-01T00:00:00Z,light,extra\n", "More cells"),
    ],
)
def test_bad_files(technician, gpu, text, message):
    result = records_import_csv(data=text.encode(), user=technician, dry_run=False)
    assert not result.ok and not result.written
    shown = " ".join(result.header_errors) + " ".join(m for r in result.rows for _, m in r.errors)
    assert message in shown
    assert MaintenanceRecord.objects.count() == 0


def test_binary_file_refused(client_for, technician):
    response = client_for(technician).post("/records/import/", {"file": upload("\x00\x01")})
    assert response.status_code == 400


def test_roles(client_for, viewer, outsider, gpu):
    assert client_for(viewer).get("/records/").status_code == 200
    assert client_for(viewer).get("/records/import/").status_code == 403
    text = GOOD.format(uuid=gpu.uuid)
    assert client_for(viewer).post("/records/import/", {"csv_text": text, "confirm": "1"}).status_code == 403
    assert client_for(outsider).get("/records/").status_code == 403
    assert MaintenanceRecord.objects.count() == 0
