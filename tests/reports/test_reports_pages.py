"""The report page (filters, sorting, links, MTBF interval, few-failure flags), a GPU's repair
history (who recorded and changed each repair), the RMA evidence pack, the repeat-offender flag on
the GPU page, and the chi-square quantiles behind the interval."""

import datetime as dt
import json
from decimal import Decimal

import pytest
from django.utils import timezone

from portal.fleet import services
from portal.fleet.models import GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from portal.reports.stats import chi2_quantile_even, mtbf_interval
from tests.factories import GpuFactory, HostFactory


@pytest.mark.parametrize(
    "p, df, expected",  # scipy.stats.chi2.ppf values
    [(0.95, 2, 5.991464547), (0.05, 2, 0.102586589), (0.95, 10, 18.307038054), (0.05, 10, 3.940299136),
     (0.975, 4, 11.143286782), (0.025, 40, 24.433039170)],
)  # fmt: skip
def test_chi2_quantiles(p, df, expected):
    assert chi2_quantile_even(p, df) == pytest.approx(expected, rel=1e-7)


def test_mtbf_interval():
    low, high = mtbf_interval(10_000, 4, 0.90)
    assert low == pytest.approx(2 * 10_000 / 18.307038054, rel=1e-6)
    assert high == pytest.approx(2 * 10_000 / 2.732636793, rel=1e-6)
    assert mtbf_interval(10_000, 0, 0.90)[1] is None
    assert mtbf_interval(0, 3) == (None, None)


def _history_gpu(now):
    host = HostFactory(hostname="dgx-09")
    gpu = GpuFactory(host=host, serial="SN-LEMON", model_name="A100")
    GpuStatusChange.objects.create(gpu=gpu, changed_at=now - dt.timedelta(days=300), to_status="in_service",
                                   source="registration")  # fmt: skip
    return gpu


@pytest.mark.django_db
def test_report_page_filters_sorting_links(client_for, viewer):
    now = timezone.now()
    gpu = _history_gpu(now)
    other = GpuFactory(serial="SN-OTHER", model_name="H100")
    for days in (100, 40):
        MaintenanceRecord.objects.create(
            kind="repair",
            host=gpu.host,
            gpu=gpu,
            performed_by="ACME",
            performed_at=now - dt.timedelta(days=days),
            downtime_hours=Decimal(12),
        )
    client = client_for(viewer)
    page = client.get("/reports/reliability")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"/reports/gpus/{gpu.uuid}/repairs" in html and "SN-OTHER" in html
    assert "rests on fewer than 3 failures" in html and "90 % chi-square" in html
    assert "format=csv" in html and "format=pdf" in html

    def gpu_table(params):
        page = client.get("/reports/reliability", params).content.decode()
        return page[page.index('class="figures sortable"') :]  # the lemons section above names SN-LEMON too

    sorted_page = gpu_table({"sort": "-repairs"})
    assert sorted_page.index("SN-LEMON") < sorted_page.index("SN-OTHER")
    sorted_page = gpu_table({"sort": "repairs"})
    assert sorted_page.index("SN-OTHER") < sorted_page.index("SN-LEMON")
    only = client.get("/reports/reliability", {"model": "H100"}).content.decode()
    assert "SN-OTHER" in only and "SN-LEMON" not in only
    assert other.uuid


@pytest.mark.django_db
def test_report_page_bad_input_and_roles(client_for, viewer, outsider):
    response = client_for(viewer).get("/reports/reliability", {"from": "2025-13-01", "to": "2025-01-01"})
    assert response.status_code == 400
    assert "from:" in response.content.decode()
    assert client_for(outsider).get("/reports/reliability").status_code == 403
    assert client_for(None).get("/reports/reliability").status_code == 302  # to the login page


@pytest.mark.django_db
def test_repair_history_shows_who_recorded_and_changed_each_repair(client_for, technician, admin, viewer):
    now = timezone.now()
    gpu = _history_gpu(now)
    record = services.record_create(kind="repair", host=gpu.host, gpu=gpu, recorded_by=technician,
                                    performed_at=now - dt.timedelta(days=3), performed_by="ACME", vendor="ACME",
                                    outcome="fixed")  # fmt: skip
    # The audit trail takes the actor from the request; a page edit is how people change records.
    from auditlog.context import set_actor

    with set_actor(admin):
        services.record_update(record=record, user=admin, cost=Decimal("420.00"))
    services.gpu_status_set(gpu=gpu, status="out_for_repair", user=technician, reason="XID 79 twice", source="api")
    page = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/repairs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "ACME" in html and "<strong>alice</strong>" in html and "<code>cost</code>" in html
    assert "XID 79 twice" in html and "out_for_repair" in html
    assert client_for(viewer).get("/reports/gpus/GPU-nope/repairs").status_code == 404


@pytest.mark.django_db
def test_repeat_offender_on_report_and_gpu_page(client_for, viewer):
    now = timezone.now()
    gpu = _history_gpu(now)
    for days, code, rule in ((60, 79, "xid_bus"), (20, 48, "xid_ecc"), (10, 13, "xid_application")):
        at = now - dt.timedelta(days=days)
        Ticket.objects.create(
            fingerprint=f"f{days}",
            rule=rule,
            host=gpu.host,
            gpu=gpu,
            title=rule,
            first_seen=at,
            last_seen=at,
            evidence={"readings": [[at.timestamp(), code]]},
        )
    quiet = GpuFactory(serial="SN-ONE-XID")
    at = now - dt.timedelta(days=5)
    Ticket.objects.create(fingerprint="q", rule="xid_hardware", host=quiet.host, gpu=quiet, title="GSP",
                          first_seen=at, last_seen=at, evidence={"readings": [[at.timestamp(), 119]]})  # fmt: skip
    period = {"from": (now - dt.timedelta(days=30)).isoformat(), "to": (now + dt.timedelta(days=1)).isoformat()}
    body = client_for(viewer).get("/api/v1/reports/reliability", period).json()
    assert [o["uuid"] for o in body["repeat_offenders"]] == [gpu.uuid]
    page = client_for(viewer).get(gpu.get_absolute_url()).content.decode()
    assert "Repeat offender" in page and "2 hardware failures within 90 days" in page
    assert "Repeat offender</span>" not in client_for(viewer).get(quiet.get_absolute_url()).content.decode()


@pytest.mark.django_db
def test_hardware_xid_again_after_a_repair_is_a_repeat_offender(client_for, viewer):
    now = timezone.now()
    gpu = _history_gpu(now)
    before, after = now - dt.timedelta(days=200), now - dt.timedelta(days=10)
    for name, at in (("a", before), ("b", after)):
        Ticket.objects.create(fingerprint=name, rule="xid_bus", host=gpu.host, gpu=gpu, title="bus", first_seen=at,
                              last_seen=at, evidence={"readings": [[at.timestamp(), 79]]})  # fmt: skip
    MaintenanceRecord.objects.create(kind="repair", host=gpu.host, gpu=gpu, performed_by="ACME",
                                     performed_at=now - dt.timedelta(days=150))  # fmt: skip
    page = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/repairs").content.decode()
    assert "again on" in page and "after the repair" in page


@pytest.mark.django_db
def test_rma_evidence_pack(client_for, viewer, outsider):
    now = timezone.now()
    gpu = _history_gpu(now)
    gpu.vbios_version = "96.00.89.00.01"
    gpu.save()
    MaintenanceRecord.objects.create(
        kind="driver_update",
        host=gpu.host,
        performed_by="agent",
        performed_at=now - dt.timedelta(days=30),
        from_version="535",
        to_version="550",
    )
    MaintenanceRecord.objects.create(kind="repair", host=gpu.host, gpu=gpu, performed_by="ACME", rma_number="RMA-1",
                                     performed_at=now - dt.timedelta(days=2))  # fmt: skip
    at = now - dt.timedelta(days=3)
    Ticket.objects.create(fingerprint="x", rule="xid_bus", host=gpu.host, gpu=gpu, title="bus", first_seen=at,
                          last_seen=at, evidence={"readings": [[at.timestamp(), 79]]})  # fmt: skip
    response = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.json")
    assert response.status_code == 200
    pack = json.loads(response.content)
    assert (pack["gpu"]["serial"], pack["gpu"]["model"], pack["gpu"]["vbios"]) == ("SN-LEMON", "A100", "96.00.89.00.01")
    assert [d["to"] for d in pack["driver_history"]] == ["550"]
    assert [r["rma_number"] for r in pack["repairs"]] == ["RMA-1"]
    assert pack["hardware_tickets"][0]["rule"] == "xid_bus" and pack["failure_at"] is not None
    for key in ("xid_timeline", "ecc_row_remap_trend", "pcie_link_history", "thermal_around_failure", "status_history"):
        assert isinstance(pack[key], list), key
    pdf = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.pdf")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
    assert client_for(outsider).get(f"/reports/gpus/{gpu.uuid}/rma.json").status_code == 403
