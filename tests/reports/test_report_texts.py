"""The reports' texts as a person reads them: the RMA pack's PDF (a host without a location, flags as
words, one row per day, NVIDIA's mnemonics whole, XIDs by failure category), the reliability PDF's
period in the portal's date format, and the repeat offenders' reasons in the reader's language."""

import datetime as dt
import io

import pytest
from django.utils import timezone, translation
from pypdf import PdfReader

from portal.fleet.models import GpuStatusChange
from portal.maintenance.models import Ticket
from portal.reports.rma import flag_shown, rows_by_day
from portal.telemetry.models import XidEvent
from tests.factories import GpuFactory, HostFactory


def _text(pdf: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)


def _gpu(now):
    gpu = GpuFactory(host=HostFactory(hostname="rma-host", location="", rack=""), serial="SN-RMA", index=0)
    GpuStatusChange.objects.create(gpu=gpu, changed_at=now - dt.timedelta(days=400), to_status="in_service",
                                   source="registration", reason="Registered.")  # fmt: skip
    return gpu


def _xid_ticket(gpu, at, code, rule):
    XidEvent.objects.create(gpu=gpu, ts=at, code=code)
    return Ticket.objects.create(fingerprint=f"{rule}/{at.timestamp()}", rule=rule, host=gpu.host, gpu=gpu,
                                 title=rule, first_seen=at, last_seen=at,
                                 evidence={"readings": [[at.timestamp(), code]]})  # fmt: skip


@pytest.mark.django_db
def test_the_rma_pdf_reads_as_a_vendor_would_read_it(client_for, viewer):
    now = timezone.now()
    gpu = _gpu(now)
    _xid_ticket(gpu, now - dt.timedelta(days=3), 79, "xid_bus")
    text = _text(client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.pdf").content)
    assert "rma-host" in text and "( )" not in text and "rma-host (" not in text
    assert "False" not in text and "True" not in text
    # the mnemonic whole, on its own line under the timeline; the XID counted as the report counts it
    assert "XID 79: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in text
    assert "PCIe / NVLink" in text


def test_daily_rows_one_per_day_and_flags_in_words():
    samples = [
        {"at": "2026-12-06T00:00:00+00:00", "reading_ts": "2026-12-05T23:59:58+00:00", "x": 1},
        {"at": "2026-12-07T00:00:00+00:00", "reading_ts": "2026-12-06T23:59:58+00:00", "x": 2},
        {"at": "2026-12-07T12:00:00+00:00", "reading_ts": "2026-12-07T11:59:58+00:00", "x": 3},
        {"at": "2026-12-07T12:00:01+00:00", "reading_ts": "2026-12-07T12:00:00+00:00", "x": 4},  # "now", same day
    ]
    assert [s["x"] for s in rows_by_day(samples)] == [1, 2, 4]
    with translation.override("en"):
        assert (flag_shown(False), flag_shown(True), flag_shown(None), flag_shown(3)) == ("no", "yes", "—", 3)


@pytest.mark.django_db
def test_the_reliability_pdf_prints_its_period_in_the_portals_format(client_for, viewer):
    _gpu(timezone.now())
    period = {"from": "2025-12-08T00:00:00+00:00", "to": "2026-12-08T00:00:00+00:00", "format": "pdf"}
    text = _text(client_for(viewer).get("/api/v1/reports/reliability", period).content)
    assert "2025-12-08 00:00" in text and "2025-12-08T00:00:00+00:00" not in text


@pytest.mark.django_db
def test_repeat_offender_reasons_in_the_readers_language(client_for, viewer):
    now = timezone.now()
    gpu = _gpu(now)
    for days, code, rule in ((60, 79, "xid_bus"), (20, 48, "xid_ecc")):
        _xid_ticket(gpu, now - dt.timedelta(days=days), code, rule)
    client = client_for(viewer)
    english = client.get(gpu.get_absolute_url()).content.decode()
    assert "2 hardware failures within 90 days" in english
    chinese = client.get(gpu.get_absolute_url(), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "90 天内 2 次硬件故障" in chinese and "hardware failures within" not in chinese
    period = {"from": (now - dt.timedelta(days=30)).isoformat(), "to": (now + dt.timedelta(days=1)).isoformat()}
    body = client.get("/api/v1/reports/reliability", period).json()
    assert body["repeat_offenders"][0]["reasons"][0].startswith("2 hardware failures within 90 days")
    repairs = client.get(f"/reports/gpus/{gpu.uuid}/repairs", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "已登记。" in repairs and "Registered." not in repairs


@pytest.mark.django_db
def test_the_cost_column_says_what_the_amounts_are(client_for, viewer):
    # The records store amounts without a currency (fleet's record form asks for a number): the
    # column says so instead of printing a bare "Cost" (issue 48), in both languages and the PDF (the
    # CSV keeps its machine names: `cost`).
    _gpu(timezone.now())
    client = client_for(viewer)
    assert "Cost (record currency)" in client.get("/reports/reliability").content.decode()
    assert "费用（记录所用币种）" in client.get("/reports/reliability", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    period = {"from": "2025-12-08T00:00:00+00:00", "to": "2026-12-08T00:00:00+00:00", "format": "pdf"}
    assert "Cost (record currency)" in _text(client.get("/api/v1/reports/reliability", period).content)
