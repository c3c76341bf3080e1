"""The reliability report's failure rates per GPU-year by category, beside published fleet figures,
and its lemons: GPUs and hosts that fail again within 90 days of a repair, or far more often than
the fleet."""

import datetime as dt
import io

import pytest
from pypdf import PdfReader

from portal.fleet.models import GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from portal.reports.api import ReliabilityOut
from portal.reports.baselines import HOURS_PER_YEAR
from tests.factories import GpuFactory, HostFactory

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
END = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
PERIOD = {"from": START.isoformat(), "to": END.isoformat()}
LLAMA3_GPU_YEARS = 16_384 * 54 / 365.25


def _gpu(host=None, serial="", **kwargs):
    gpu = GpuFactory(host=host or HostFactory(), serial=serial, **kwargs)
    # In service since before the period: a whole year of service hours each.
    GpuStatusChange.objects.create(gpu=gpu, changed_at=START - dt.timedelta(days=400), to_status="in_service",
                                   source="registration")  # fmt: skip
    gpu.install_date = (START - dt.timedelta(days=400)).date()
    gpu.save()
    return gpu


def _ticket(gpu, rule, at, code=None):
    evidence = {"readings": [[at.timestamp(), code]]} if code is not None else {"readings": []}
    return Ticket.objects.create(fingerprint=f"{gpu.uuid}-{rule}-{at.isoformat()}", rule=rule, host=gpu.host, gpu=gpu,
                                 title=rule, first_seen=at, last_seen=at, evidence=evidence)  # fmt: skip


def _repair(gpu=None, at=None, host=None):
    return MaintenanceRecord.objects.create(kind="repair", host=host or gpu.host, gpu=gpu, performed_by="ACME",
                                            performed_at=at)  # fmt: skip


def _report(client):
    response = client.get("/api/v1/reports/reliability", PERIOD)
    assert response.status_code == 200
    body = response.json()
    ReliabilityOut.model_validate(body)
    return body


def _by_category(body):
    return {row["category"]: row for row in body["failure_rates"]["categories"]}


@pytest.mark.django_db
def test_failures_by_category_and_rate_per_gpu_year(client_for, viewer):
    host = HostFactory(hostname="node-a")
    gpus = [_gpu(host=host, index=i) for i in range(4)]
    at = START + dt.timedelta(days=100)
    _ticket(gpus[0], "xid_hardware", at, code=79)  # GPU fallen off the bus: hardware
    _ticket(gpus[0], "xid_application", at, code=13)  # an application's fault: not a failure rule
    _ticket(gpus[1], "xid_hardware", at, code=13)  # an XID rule whose code is not a hardware failure
    _ticket(gpus[1], "ecc_uncorrected", at)
    _ticket(gpus[1], "remap_failure", at + dt.timedelta(days=1))
    _ticket(gpus[2], "pcie", at)
    _ticket(gpus[2], "xid_nvlink", at, code=74)
    _ticket(gpus[3], "overheat", at)
    _ticket(gpus[3], "overheat", START - dt.timedelta(days=5))  # before the period
    _repair(gpus[3], at + dt.timedelta(days=3))  # explained by the overheat ticket 3 days before: not "other"
    _repair(gpus[2], START + dt.timedelta(days=200))  # no ticket explains it: a failure a person found

    body = _report(client_for(viewer))
    rates = _by_category(body)
    assert {key: row["failures"] for key, row in rates.items()} == {
        "hardware_xid": 1, "memory": 2, "interconnect": 2, "thermal": 1, "other": 1,
    }  # fmt: skip
    service_hours = body["fleet"]["service_hours"]
    assert service_hours == pytest.approx(4 * (END - START).total_seconds() / 3600)
    gpu_years = service_hours / HOURS_PER_YEAR
    assert body["failure_rates"]["gpu_years"] == pytest.approx(gpu_years, rel=1e-6)
    assert rates["memory"]["per_gpu_year"] == pytest.approx(2 / gpu_years, rel=1e-5)
    assert body["failure_rates"]["all"]["failures"] == 7
    assert body["failure_rates"]["all"]["per_gpu_year"] == pytest.approx(7 / gpu_years, rel=1e-5)


@pytest.mark.django_db
def test_published_figures_are_the_papers_counts_over_their_fleets(client_for, viewer):
    _gpu()
    body = _report(client_for(viewer))
    rates = _by_category(body)
    llama = {p["source"]: p["per_gpu_year"] for p in rates["hardware_xid"]["published"]}["llama3"]
    assert llama == pytest.approx(148 / LLAMA3_GPU_YEARS, abs=1e-6)
    assert rates["memory"]["published"][0]["per_gpu_year"] == pytest.approx(72 / LLAMA3_GPU_YEARS, abs=1e-6)
    assert body["failure_rates"]["all"]["published"][0]["per_gpu_year"] == pytest.approx(
        419 / LLAMA3_GPU_YEARS, abs=1e-6
    )
    assert rates["thermal"]["published"] == []  # no study states a count for it: none is made up
    citations = " ".join(study["citation"] for study in body["published_studies"])
    assert "Llama 3 Herd of Models" in citations
    assert "Revisiting Reliability in Large-Scale Machine Learning Research Clusters" in citations
    assert "NCSA Delta" in citations


@pytest.mark.django_db
def test_a_gpu_failing_again_within_90_days_of_a_repair_is_a_lemon(client_for, viewer):
    lemon, late, fine = _gpu(serial="SN-LEMON"), _gpu(serial="SN-LATE"), _gpu(serial="SN-FINE")
    repaired = START + dt.timedelta(days=50)
    for gpu in (lemon, late):
        _ticket(gpu, "ecc_uncorrected", repaired - dt.timedelta(days=2))
        _repair(gpu, repaired)
    _ticket(lemon, "xid_bus", repaired + dt.timedelta(days=30), code=79)
    _ticket(late, "xid_bus", repaired + dt.timedelta(days=120), code=79)  # past the 90 days
    body = _report(client_for(viewer))
    lemons = {g["serial"]: g for g in body["lemons"]["gpus"]}
    assert list(lemons) == ["SN-LEMON"]
    assert lemons["SN-LEMON"]["reasons"] == [
        f"failed again on {repaired + dt.timedelta(days=30):%Y-%m-%d} (PCIe / NVLink), within 90 days of the repair of "
        f"{repaired:%Y-%m-%d}"
    ]
    assert fine.uuid not in {g["uuid"] for g in body["lemons"]["gpus"]}


@pytest.mark.django_db
def test_a_gpu_failing_far_more_often_than_the_fleet_is_a_lemon(client_for, viewer):
    host = HostFactory(hostname="node-b")
    gpus = [_gpu(host=host, index=i, serial=f"SN-{i}") for i in range(10)]
    for day in (10, 150, 300):
        _ticket(gpus[0], "overheat", START + dt.timedelta(days=day))
    _ticket(gpus[1], "overheat", START + dt.timedelta(days=20))  # one failure: bad luck, not a lemon
    body = _report(client_for(viewer))
    assert [g["serial"] for g in body["lemons"]["gpus"]] == ["SN-0"]
    (reason,) = body["lemons"]["gpus"][0]["reasons"]
    # 3 failures in a GPU-year against the fleet's 4 in 10: 7.5 times.
    assert reason.startswith("3 failures in the period: 3.00 per GPU-year, 7.5 times the fleet's 0.40")
    assert body["lemons"]["hosts"] == []  # the one host is the whole fleet


@pytest.mark.django_db
def test_a_host_failing_again_after_its_repair_and_a_host_failing_often_are_lemons(client_for, viewer):
    bad, often, calm = (
        HostFactory(hostname="node-bad"),
        HostFactory(hostname="node-often"),
        HostFactory(hostname="calm"),
    )
    bad_gpus = [_gpu(host=bad, index=i) for i in range(2)]
    often_gpus = [_gpu(host=often, index=i) for i in range(2)]
    for i in range(8):
        _gpu(host=calm, index=i)
    _repair(host=bad, at=START + dt.timedelta(days=10))  # the whole host (a PSU, say)
    _ticket(bad_gpus[1], "pcie", START + dt.timedelta(days=20))
    for gpu, day in ((often_gpus[0], 100), (often_gpus[1], 200), (often_gpus[0], 250)):
        _ticket(gpu, "xid_nvlink", START + dt.timedelta(days=day), code=74)
    body = _report(client_for(viewer))
    hosts = {h["hostname"]: h for h in body["lemons"]["hosts"]}
    assert set(hosts) == {"node-bad", "node-often"}
    assert hosts["node-bad"]["reasons"][0].startswith(
        f"GPU 1 failed on {START + dt.timedelta(days=20):%Y-%m-%d} (PCIe / NVLink), within 90 days of the host's repair"
    )
    # 3 failures over 2 GPU-years against the fleet's 4 over 12: 4.5 times.
    assert hosts["node-often"]["reasons"] == ["3 failures in the period: 1.50 per GPU-year, 4.5 times the fleet's 0.33"]
    assert hosts["node-often"]["gpus"] == 2 and hosts["node-often"]["failures"] == 3


@pytest.mark.django_db
def test_page_and_pdf_show_rates_sources_and_lemons_in_the_readers_language(client_for, viewer):
    gpu = _gpu(serial="SN-<b>LEMON</b>")
    repaired = START + dt.timedelta(days=50)
    _repair(gpu, repaired)
    _ticket(gpu, "overheat", repaired + dt.timedelta(days=5))
    client = client_for(viewer)
    html = client.get("/reports/reliability", PERIOD).content.decode()
    assert "Failures per GPU-year, beside published fleets" in html and "Llama 3 (Meta, 2024)" in html
    assert "The Llama 3 Herd of Models" in html and "Lemons" in html
    assert "SN-&lt;b&gt;LEMON&lt;/b&gt;" in html and "<b>LEMON</b>" not in html
    zh = client.get("/reports/reliability", PERIOD, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "过热" in zh and "failed again on" not in zh

    pdf = client.get("/api/v1/reports/reliability", {**PERIOD, "format": "pdf"})
    assert pdf.status_code == 200
    text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf.content)).pages)
    assert "Failures per GPU-year" in text and "Lemons" in text and "Llama 3" in text
    assert "SN-<b>LEMON</b>" in text  # the serial as typed, not markup


@pytest.mark.django_db
def test_failure_rates_need_the_report_permission(client_for, outsider):
    assert client_for(outsider).get("/api/v1/reports/reliability", PERIOD).status_code == 403
