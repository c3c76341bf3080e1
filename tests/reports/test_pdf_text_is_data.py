"""Text that users and agents typed is data in every PDF the portal writes (the RMA evidence pack
and the reliability report): ReportLab markup in any text field that reaches a PDF reads as
written and embeds nothing, line breaks and long text never fail the layout, and the report's
`host` filter is a host name (400 naming it)."""

import datetime as dt
import io
import re
import shutil
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest
from pypdf import PdfReader

import portal
from portal.checklists.models import ChecklistRun, ChecklistTemplate
from portal.fleet.models import Gpu, GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

PERIOD = {"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
UTC = dt.UTC
REGISTERED = dt.datetime(2024, 1, 1, tzinfo=UTC)
AT = dt.datetime(2025, 6, 1, tzinfo=UTC)

# A real 1x1 PNG: were typed `<img src=…>` taken as markup, the PDF would embed the file.
PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7V\xbd\xfa\x00\x00\x00\x00IEND\xaeB`\x82"
)


@pytest.fixture
def payloads():
    # A short path, so that the whole tag fits even the 64-character fields.
    folder = Path(tempfile.mkdtemp(prefix="i", dir="/tmp"))
    (folder / "a.png").write_bytes(PNG)
    yield [
        f'<img src="{folder}/a.png"/>',
        '<font color="red" size="30">FONT</font>',
        "a & b &amp; c",
        "x<y",
        "<b>unbalanced",
        "</para>",
    ]
    shutil.rmtree(folder)


def pdf_text(content: bytes) -> str:
    return " ".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


def assert_no_image(content: bytes):
    assert b"/Subtype /Image" not in content
    assert sum(len(page.images) for page in PdfReader(io.BytesIO(content)).pages) == 0


def flat(text: str) -> str:
    """Text without whitespace: a PDF wraps a long paragraph, and extraction reads each line break as one."""
    return re.sub(r"\s+", "", text)


def marked_gpu(payload: str, user) -> tuple[Gpu, dict[str, str]]:
    """A GPU whose every text field reaching a PDF (and its host's, records', ticket's, status history's
    and checklist run's) holds `payload` after a tag naming the field, cut to the field's length."""
    values = {}

    def value(field: str, max_length: int) -> str:
        values[field] = f"{field}:{payload}"[:max_length]
        return values[field]

    host = HostFactory(location=value("location", 200), rack=value("rack", 100), driver_version=value("drv", 64))
    gpu = GpuFactory(host=host, serial=value("serial", 64), model_name=value("model", 128),
                     vbios_version=value("vbios", 64), pci_bus_id=value("pci", 32))  # fmt: skip
    Gpu.objects.filter(pk=gpu.pk).update(created_at=REGISTERED)
    GpuStatusChange.objects.create(gpu=gpu, changed_at=REGISTERED, from_status="", to_status="in_service",
                                   source="registration", reason=value("reason", 2000))  # fmt: skip
    MaintenanceRecord.objects.create(
        kind="repair", host=host, gpu=gpu, performed_at=AT, performed_by=value("by", 150),
        vendor=value("vendor", 200), rma_number=value("rma", 100), parts=value("parts", 500), notes=payload,
        downtime_hours=Decimal(3), cost=Decimal(10),
    )  # fmt: skip
    MaintenanceRecord.objects.create(kind="driver_update", host=host, performed_at=AT, performed_by=value("dby", 150),
                                     from_version=value("from", 64), to_version=value("to", 64))  # fmt: skip
    Ticket.objects.create(fingerprint=f"xid/{gpu.pk}", rule="xid_bus", host=host, gpu=gpu, title=value("title", 200),
                          first_seen=AT, last_seen=AT, evidence={"readings": [[AT.timestamp(), 79]]})  # fmt: skip
    template = ChecklistTemplate.objects.create(key=f"t{gpu.pk}", name=value("template", 200), record_kind="repair")
    run = ChecklistRun.objects.create(template=template, template_version=1, template_name=template.name,
                                      record_kind="repair", host=host, state="completed", started_at=AT,
                                      started_by=user, completed_at=AT, completed_by=user)  # fmt: skip
    run.gpus.add(gpu)
    return gpu, values


def test_rma_pack_shows_every_text_field_as_written(client_for, viewer, payloads):
    for payload in payloads:
        gpu, values = marked_gpu(payload, viewer)
        response = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.pdf")
        assert response.status_code == 200, (payload, response.content[:300])
        assert_no_image(response.content)
        text = flat(pdf_text(response.content))
        for field, written in values.items():
            assert flat(written) in text, (field, written)


def test_reliability_pdf_shows_every_text_field_as_written(client_for, viewer, payloads):
    for payload in payloads:
        gpu, values = marked_gpu(payload, viewer)
        # The model filter is printed in the report's header; only this GPU has the model.
        query = {**PERIOD, "format": "pdf", "model": gpu.model_name}
        response = client_for(viewer).get("/api/v1/reports/reliability", query)
        assert response.status_code == 200, (payload, response.content[:300])
        assert_no_image(response.content)
        text = flat(pdf_text(response.content))
        assert flat(f"all, model: {values['model']}") in text, payload  # the filters, in the header
        assert text.count(flat(values["model"])) == 3, payload  # the header, the model's and the GPU's rows
        assert flat(values["serial"]) in text, payload
        # The repairs table shows the start of each text (the whole of it is in the JSON and the RMA pack).
        for field, shown in (("by", 16), ("vendor", 16), ("rma", 16), ("parts", 20)):
            assert flat(values[field][:shown]) in text, (field, payload)
        assert flat(payload[:30]) in text, payload  # notes


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


@pytest.mark.parametrize(
    "fields",
    [
        {"serial": "\n" * 64},  # an agent may report it: one line per newline made a row taller than the page
        {"model_name": "x\n" * 64},
        {"vendor": "\n" * 200},
        {"vendor": "V" * 200},  # an auto-sized column left the parts paragraph beside it a negative width
        {"vendor": words("vendor", 20), "performed_by": words("by", 30), "rma_number": words("rma", 16)},
        {"reason": words("why", 280)},  # taller than a page in its column: the row splits across pages
        {"location": "\r\n" * 100},
        # Not the fonts' glyphs (Helvetica draws a box) but never a failure: CJK fonts can come later.
        {"serial": "序列号-1", "model_name": "英伟达 H100", "vendor": "供应商", "parts": "显存", "reason": "原因"},
    ],
    ids=lambda fields: ",".join(fields),
)
def test_long_or_multiline_text_never_breaks_a_pdf(client_for, viewer, fields):
    host = HostFactory(location=fields.get("location", ""))
    gpu = GpuFactory(host=host, serial=fields.get("serial", "SN-1"), model_name=fields.get("model_name", "H100"))
    Gpu.objects.filter(pk=gpu.pk).update(created_at=REGISTERED)
    GpuStatusChange.objects.create(gpu=gpu, changed_at=REGISTERED, from_status="", to_status="in_service",
                                   source="registration", reason=fields.get("reason", ""))  # fmt: skip
    MaintenanceRecord.objects.create(
        kind="repair", host=host, gpu=gpu, performed_at=AT, performed_by=fields.get("performed_by", "ACME"),
        vendor=fields.get("vendor", ""), rma_number=fields.get("rma_number", ""), parts=fields.get("parts", ""),
    )  # fmt: skip
    client = client_for(viewer)
    rma = client.get(f"/reports/gpus/{gpu.uuid}/rma.pdf")
    report = client.get("/api/v1/reports/reliability", {**PERIOD, "format": "pdf"})
    assert (rma.status_code, report.status_code) == (200, 200), (rma.content[:300], report.content[:300])
    assert gpu.uuid in flat(pdf_text(rma.content)) and host.hostname in pdf_text(report.content)
    # The RMA pack wraps text in its column, in full, never cut (a vendor reads it).
    shown = set(re.findall(r"\w+", pdf_text(rma.content)))
    for name, value in fields.items():
        if re.fullmatch(r"(\w+\d+ ?)+", value):
            assert set(value.split()) <= shown, name


@pytest.mark.parametrize("host", ['<img src="/dev/zero"/>', "a<b&c", "-", "a b", "x" * 64, "node-1\n", "node..x"])
def test_host_filter_must_be_a_host_name(client_for, viewer, host):
    client = client_for(viewer)
    for fmt in ("json", "csv", "pdf"):
        response = client.get("/api/v1/reports/reliability", {**PERIOD, "format": fmt, "host": host})
        assert response.status_code == 400, (fmt, response.content[:200])
        assert [d["loc"] for d in response.json()["detail"]] == ["host"]
    # with a bad period too: one answer names both
    response = client.get("/api/v1/reports/reliability", {**PERIOD, "from": "nope", "host": host})
    assert response.status_code == 400
    assert {d["loc"] for d in response.json()["detail"]} == {"from", "host"}
    if host.strip() == host:  # the page strips what was typed
        page = client.get("/reports/reliability", {"from": "2025-01-01", "to": "2026-01-01", "host": host})
        assert page.status_code == 400 and "Not a host name" in page.content.decode()


def test_a_host_name_filters(client_for, viewer):
    gpu = GpuFactory(host=HostFactory(hostname="dgx_07.lab-a"))
    Gpu.objects.filter(pk=gpu.pk).update(created_at=REGISTERED)
    response = client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "host": "dgx_07.lab-a"})
    assert response.status_code == 200 and [row["uuid"] for row in response.json()["gpus"]] == [gpu.uuid]


def test_every_paragraph_and_table_goes_through_the_safe_helpers():
    """Paragraphs are built by portal.core.exports (data escaped), tables by pdf_table (cells one line)."""
    root = Path(portal.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        relative = str(path.relative_to(root))
        source = path.read_text()
        if relative != "core/exports.py" and re.search(r"(?<![\w.])Paragraph\(", source):
            offenders.append(f"{relative}: Paragraph")
        if relative != "reports/exports.py" and re.search(r"(?<![\w.])(Long)?Table\(", source):
            offenders.append(f"{relative}: Table")
    assert offenders == []


def test_chinese_text_renders_in_the_cid_font(client_for, viewer):
    """Chinese in a record, a ticket title and a model filter: set in STSong-Light (no empty boxes)
    and read back as written."""
    gpu, values = marked_gpu("更换风扇 <b>&", viewer)
    pack = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.pdf")
    assert pack.status_code == 200 and b"STSong-Light" in pack.content
    text = flat(pdf_text(pack.content))
    for field, written in values.items():
        assert flat(written) in text, field
    report = client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "format": "pdf", "model": "显卡 A100"})
    assert report.status_code == 200 and b"STSong-Light" in report.content
    assert "显卡A100" in flat(pdf_text(report.content))
    listed = flat(pdf_text(client_for(viewer).get("/api/v1/reports/reliability", {**PERIOD, "format": "pdf"}).content))
    for field in ("serial", "model"):  # plain table cells holding Chinese
        assert flat(values[field]) in listed, field
