"""Text that users and agents typed stays text in every file the portal writes: ReportLab markup in
any field that reaches a PDF reads as written and embeds nothing; CSV text cells never start a
spreadsheet formula; download names are quoted by Django's rules; the report's `host` filter is a
host name (400 naming it)."""

import csv
import datetime as dt
import io
import re
from decimal import Decimal

import pytest
from pypdf import PdfReader

from portal.core.exports import csv_cell
from portal.fleet.models import Gpu, GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

PERIOD = {"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
UTC = dt.UTC

# A real image on this machine: on the old code `<img src=...>` in a paragraph embeds it.
PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7V\xbd\xfa\x00\x00\x00\x00IEND\xaeB`\x82"
)


@pytest.fixture
def payloads(tmp_path):
    image = tmp_path / "secret.png"
    image.write_bytes(PNG)
    return [
        f'<img src="{image}" width="20" height="20"/>',
        '<font color="red" size="30">FONT</font>',
        "a & b",
        "x<y",
        "<b>unbalanced",
        "</para>",
    ]


def pdf_text(content: bytes) -> str:
    return " ".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


def assert_no_image(content: bytes):
    assert b"/Subtype /Image" not in content
    assert sum(len(page.images) for page in PdfReader(io.BytesIO(content)).pages) == 0


def flat(text: str) -> str:
    return re.sub(r"\s+", "", text)


def marked_gpu(payload: str) -> Gpu:
    """A GPU whose every text field (and its host's, records', tickets' and history's) holds `payload`."""
    host = HostFactory(location=payload[:64], rack=payload[:32], driver_version=payload[:32])
    gpu = GpuFactory(host=host, serial=payload[:64], model_name=payload[:128], vbios_version=payload[:32],
                     pci_bus_id=payload[:32])  # fmt: skip
    registered = dt.datetime(2024, 1, 1, tzinfo=UTC)
    Gpu.objects.filter(pk=gpu.pk).update(created_at=registered)
    GpuStatusChange.objects.create(gpu=gpu, changed_at=registered, from_status="", to_status="in_service",
                                   source="registration", reason=payload)  # fmt: skip
    at = dt.datetime(2025, 6, 1, tzinfo=UTC)
    MaintenanceRecord.objects.create(
        kind="repair", host=host, gpu=gpu, performed_at=at, performed_by=payload[:128], vendor=payload[:128],
        rma_number=payload[:64], parts=payload, notes=payload, downtime_hours=Decimal(3), cost=Decimal(10),
    )  # fmt: skip
    MaintenanceRecord.objects.create(kind="driver_update", host=host, performed_at=at, performed_by=payload[:128],
                                     from_version=payload[:32], to_version=payload[:32])  # fmt: skip
    Ticket.objects.create(fingerprint=f"xid/{gpu.pk}", rule="xid_bus", host=host, gpu=gpu, title=payload,
                          first_seen=at, last_seen=at, evidence={"readings": [[at.timestamp(), 79]]})  # fmt: skip
    return gpu


def test_every_text_field_reaches_the_reliability_pdf_as_written(client_for, viewer, payloads):
    gpus = [marked_gpu(payload) for payload in payloads]
    response = client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "format": "pdf"})
    assert response.status_code == 200, response.content[:300]
    assert_no_image(response.content)
    text = flat(pdf_text(response.content))
    for gpu in gpus:  # the serial column is wide enough for every payload's first 20 characters
        assert flat(gpu.serial[:20]) in text, gpu.serial


@pytest.mark.parametrize("index", range(6))
def test_every_text_field_reaches_the_rma_pack_as_written(client_for, viewer, payloads, index):
    payload = payloads[index]
    gpu = marked_gpu(payload)
    response = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.pdf")
    assert response.status_code == 200, response.content[:300]
    assert_no_image(response.content)
    text = flat(pdf_text(response.content))
    # Paragraphs (title, parts, ticket title, status reason) carry the whole text.
    assert text.count(flat(payload)) >= 3, (payload, text[:2000])


def test_model_filter_with_markup_reads_as_written(client_for, viewer, payloads):
    model = payloads[0]
    GpuFactory(model_name=model)
    response = client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "format": "pdf", "model": model})
    assert response.status_code == 200
    assert_no_image(response.content)
    assert flat(model) in flat(pdf_text(response.content))


@pytest.mark.parametrize("host", ['<img src="/dev/zero"/>', "a<b&c", "-", "a b", "x" * 64])
def test_host_filter_must_be_a_host_name(client_for, viewer, host):
    for fmt in ("json", "csv", "pdf"):
        response = client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "format": fmt, "host": host})
        assert response.status_code == 400, (fmt, response.content[:200])
        assert [d["loc"] for d in response.json()["detail"]] == ["host"]


@pytest.mark.parametrize(
    ("serial", "model"),
    [('=HYPERLINK("http://x","y")', "@SUM(A1:A9)"), ("+1+2", "-3+4"), ("\tTAB", "\rCR")],
)
def test_csv_text_never_starts_a_formula(client_for, viewer, serial, model):
    gpu = GpuFactory(serial=serial, model_name=model)
    Gpu.objects.filter(pk=gpu.pk).update(created_at=dt.datetime(2024, 1, 1, tzinfo=UTC))
    response = client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    (row,) = [r for r in rows if r["uuid"] == gpu.uuid]
    assert row["serial"] == "'" + serial and row["model"] == "'" + model
    # numbers the portal writes stay numbers
    assert float(row["service_hours"]) == pytest.approx(8760.0) and row["repairs"] == "0"


def test_csv_cell_rule():
    assert [csv_cell(v) for v in ("=1", "+1", "-1", "@x", "\tx", "\rx", "ok", "a=b")] == [
        "'=1", "'+1", "'-1", "'@x", "'\tx", "'\rx", "ok", "a=b",
    ]  # fmt: skip
    assert [csv_cell(v) for v in (-3.5, -2, None, 0.1)] == ["-3.5", "-2", "", "0.1"]


@pytest.mark.parametrize(
    ("serial", "expected"),
    [
        ('a"b;c', 'attachment; filename="rma-a\\"b;c.{ext}"'),
        ("ü-名", "attachment; filename*=utf-8''rma-%C3%BC-%E5%90%8D.{ext}"),
        ("x\r\nSet-Cookie: y=1", "attachment; filename*=utf-8''rma-x%0D%0ASet-Cookie%3A%20y%3D1.{ext}"),
    ],
)
def test_download_names_are_quoted_by_django(client_for, viewer, serial, expected):
    gpu = GpuFactory(serial=serial)
    for ext in ("pdf", "json"):
        response = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.{ext}")
        assert response.status_code == 200
        assert response["Content-Disposition"] == expected.format(ext=ext)


def test_listed_by_install_date_even_when_registered_later(client_for, viewer):
    """Registered this week, installed two years ago: last year's report lists it, from its install date."""
    late_registered = GpuFactory(install_date=dt.date(2024, 1, 1))
    Gpu.objects.filter(pk=late_registered.pk).update(created_at=dt.datetime(2026, 11, 30, tzinfo=UTC))
    installed_after = GpuFactory(install_date=dt.date(2026, 1, 1))  # starts exactly at `to`: not listed
    Gpu.objects.filter(pk=installed_after.pk).update(created_at=dt.datetime(2024, 1, 1, tzinfo=UTC))
    body = client_for(viewer).get("/api/v1/reports/reliability", PERIOD).json()
    rows = {row["uuid"]: row for row in body["gpus"]}
    assert rows[late_registered.uuid]["service_hours"] == pytest.approx(8760.0)
    assert installed_after.uuid not in rows
    assert body["fleet"]["gpus"] == 1


def test_no_paragraph_or_download_header_is_built_by_hand():
    """Every PDF paragraph goes through portal.core.exports, and every download name through Django's quoting."""
    from pathlib import Path

    import portal

    root = Path(portal.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "exports.py" and path.parent.name == "core":
            continue
        source = path.read_text()
        if re.search(r"(?<![\w.])Paragraph\(", source) or re.search(r"filename=\"\{|filename=\{", source):
            offenders.append(str(path.relative_to(root)))
    assert offenders == []


def test_chinese_text_renders_in_the_cid_font(client_for, viewer):
    """Chinese in a record, a ticket title and a model filter: set in STSong-Light (no empty boxes)
    and read back as written."""
    gpu = marked_gpu("更换风扇 <b>&")
    pack = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.pdf")
    assert pack.status_code == 200 and b"STSong-Light" in pack.content
    assert "更换风扇<b>&" in flat(pdf_text(pack.content))
    report = client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "format": "pdf", "model": "显卡 A100"})
    assert report.status_code == 200 and b"STSong-Light" in report.content
    assert "显卡A100" in flat(pdf_text(report.content))
