"""GET /api/v1/reports/reliability against the contract's definitions: period edges (half-open),
install date inside the period, registration inside the period, retired GPUs, repairs without
downtime or cost, out-for-repair intervals, hardware tickets, model and fleet sums; CSV, PDF, bad
input and roles."""

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from pypdf import PdfReader

from portal.fleet.models import Gpu, GpuStatusChange, MaintenanceRecord
from portal.maintenance.models import Ticket
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC
FROM = dt.datetime(2025, 1, 1, tzinfo=UTC)
TO = dt.datetime(2026, 1, 1, tzinfo=UTC)
YEAR_H = 8760.0
PARAMS = {"from": "2025-01-01T00:00:00Z", "to": "2026-01-01T00:00:00+00:00"}


def t(*args):
    return dt.datetime(*args, tzinfo=UTC)


def gpu_at(registered, *, status="in_service", history=(), host=None, model="NVIDIA H100 80GB HBM3", **values):
    """A GPU registered at `registered` whose status history is [(at, status)...] after the first row."""
    gpu = GpuFactory(host=host or HostFactory(), model_name=model, status=status, **values)
    Gpu.objects.filter(pk=gpu.pk).update(created_at=registered)
    gpu.refresh_from_db()
    GpuStatusChange.objects.create(gpu=gpu, changed_at=registered, from_status="", to_status="in_service",
                                   source="registration")  # fmt: skip
    previous = "in_service"
    for at, to_status in history:
        GpuStatusChange.objects.create(gpu=gpu, changed_at=at, from_status=previous, to_status=to_status, source="api")
        previous = to_status
    return gpu


def repair(gpu, at, downtime=None, cost=None, host_wide=False):
    return MaintenanceRecord.objects.create(
        kind="repair", host=gpu.host, gpu=None if host_wide else gpu, performed_at=at, performed_by="ACME",
        downtime_hours=None if downtime is None else Decimal(str(downtime)),
        cost=None if cost is None else Decimal(str(cost)),
    )  # fmt: skip


def ticket(gpu, rule, first_seen, code=None):
    evidence = {"readings": [[first_seen.timestamp(), code]]} if code is not None else {}
    return Ticket.objects.create(
        fingerprint=f"{rule}/gpu/{gpu.pk}/{first_seen.timestamp()}", rule=rule, host=gpu.host, gpu=gpu, title=rule,
        first_seen=first_seen, last_seen=first_seen, evidence=evidence,
    )  # fmt: skip


def get(client, **params):
    return client.get("/api/v1/reports/reliability", {**PARAMS, **params})


def row_of(body, gpu):
    rows = [row for row in body["gpus"] if row["uuid"] == gpu.uuid]
    return rows[0] if rows else None


def test_full_year_with_repairs_at_the_edges(client_for, viewer):
    gpu = gpu_at(t(2024, 3, 1))
    repair(gpu, FROM, downtime=5)  # at `from`: counted; no cost
    repair(gpu, t(2025, 6, 1, 12), cost=200.5)  # no downtime
    repair(gpu, TO, downtime=99, cost=999)  # at `to`: outside (half-open)
    repair(gpu, t(2025, 3, 1), downtime=7, cost=7, host_wide=True)  # the whole host: not a GPU repair
    MaintenanceRecord.objects.create(kind="cleaning", host=gpu.host, gpu=gpu, performed_at=t(2025, 2, 1),
                                     performed_by="x", dust_level="light")  # fmt: skip
    response = get(client_for(viewer))
    assert response.status_code == 200, response.content
    body = response.json()
    from portal.reports.api import ReliabilityOut

    ReliabilityOut.model_validate(body)  # the JSON is answered without ninja's validation: hold it here
    assert body["from"] == "2025-01-01T00:00:00+00:00" and body["to"] == "2026-01-01T00:00:00+00:00"
    row = row_of(body, gpu)
    assert set(row) == {"uuid", "hostname", "index", "model", "serial", "service_hours", "repairs", "downtime_hours",
                        "cost", "mtbf_hours", "mttr_hours", "availability", "hardware_tickets"}  # fmt: skip
    assert row["service_hours"] == pytest.approx(YEAR_H)
    assert (row["repairs"], row["downtime_hours"], row["cost"]) == (2, 5.0, 200.5)
    assert isinstance(row["cost"], float) and isinstance(row["repairs"], int)
    assert row["mtbf_hours"] == pytest.approx(YEAR_H / 2)
    assert row["mttr_hours"] == pytest.approx(2.5)
    assert row["availability"] == pytest.approx(YEAR_H / (YEAR_H + 5))


def test_no_repairs_means_null_mtbf_and_mttr(client_for, viewer):
    gpu = gpu_at(t(2024, 1, 1))
    row = row_of(get(client_for(viewer)).json(), gpu)
    assert (row["repairs"], row["mtbf_hours"], row["mttr_hours"], row["availability"]) == (0, None, None, 1.0)
    assert (row["downtime_hours"], row["cost"]) == (0.0, 0.0)


def test_install_date_inside_the_period_starts_at_midnight_utc(client_for, viewer):
    gpu = gpu_at(t(2024, 1, 1), install_date=dt.date(2025, 7, 1))
    row = row_of(get(client_for(viewer)).json(), gpu)
    assert row["service_hours"] == pytest.approx(184 * 24)


def test_install_date_before_registration_counts_from_the_install_date(client_for, viewer):
    gpu = gpu_at(t(2025, 6, 1, 15, 30), install_date=dt.date(2025, 3, 1))
    row = row_of(get(client_for(viewer)).json(), gpu)
    assert row["service_hours"] == pytest.approx((TO - t(2025, 3, 1)).total_seconds() / 3600)


def test_registered_inside_the_period_without_install_date(client_for, viewer):
    gpu = gpu_at(t(2025, 12, 1, 12))
    row = row_of(get(client_for(viewer)).json(), gpu)
    assert row["service_hours"] == pytest.approx(30.5 * 24)


def test_started_at_or_after_to_is_not_listed(client_for, viewer):
    """Listed by the start (install date, else registration) before `to` (portal-api-v1.md)."""
    at_to = gpu_at(TO)
    installed_at_to = gpu_at(t(2024, 1, 1), install_date=dt.date(2026, 1, 1))
    registered_later = gpu_at(t(2026, 2, 1), install_date=dt.date(2024, 1, 1))
    body = get(client_for(viewer)).json()
    assert row_of(body, at_to) is None and row_of(body, installed_at_to) is None
    assert row_of(body, registered_later)["service_hours"] == pytest.approx(YEAR_H)
    assert body["fleet"]["gpus"] == 1


def test_retired_gpus(client_for, viewer):
    inside = gpu_at(t(2024, 1, 1), status="retired", history=[(t(2025, 4, 1), "retired")])
    before = gpu_at(t(2024, 1, 1), status="retired", history=[(t(2024, 12, 31, 23, 59), "retired")])
    at_from = gpu_at(t(2024, 1, 1), status="retired", history=[(FROM, "retired")])
    after = gpu_at(t(2024, 1, 1), status="retired", history=[(t(2026, 3, 1), "retired")])
    repair(inside, t(2025, 3, 1), downtime=24, cost=1000)
    body = get(client_for(viewer)).json()
    assert row_of(body, before) is None
    assert row_of(body, inside)["service_hours"] == pytest.approx(90 * 24)
    assert row_of(body, inside)["mtbf_hours"] == pytest.approx(90 * 24)
    edge = row_of(body, at_from)  # retired at `from`, not before it: listed, with nothing to count
    assert (edge["service_hours"], edge["availability"], edge["mtbf_hours"]) == (0.0, None, None)
    assert row_of(body, after)["service_hours"] == pytest.approx(YEAR_H)


def test_out_for_repair_intervals_are_subtracted(client_for, viewer):
    gpu = gpu_at(
        t(2024, 1, 1), status="out_for_repair",
        history=[
            (t(2024, 12, 31), "out_for_repair"), (t(2025, 1, 2), "in_service"),  # 24 h inside the period
            (t(2025, 6, 1), "out_for_repair"), (t(2025, 6, 3), "in_service"),  # 48 h
            (t(2025, 12, 31, 12), "out_for_repair"),  # still out: 12 h up to `to`
        ],
    )  # fmt: skip
    repair(gpu, t(2025, 6, 2), downtime=48, cost=350)
    row = row_of(get(client_for(viewer)).json(), gpu)
    assert row["service_hours"] == pytest.approx(YEAR_H - 84)
    assert row["availability"] == pytest.approx((YEAR_H - 84) / (YEAR_H - 84 + 48))


def test_hardware_tickets(client_for, viewer):
    gpu, other = gpu_at(t(2024, 1, 1)), gpu_at(t(2024, 1, 1))
    ticket(gpu, "xid_bus", t(2025, 2, 1), code=79)
    ticket(gpu, "ecc_uncorrected", FROM)
    ticket(gpu, "pcie", t(2025, 9, 1))
    ticket(gpu, "remap_failure", TO)  # at `to`: outside
    ticket(gpu, "xid_application", t(2025, 2, 1), code=13)  # application faults are never hardware
    ticket(gpu, "overheat", t(2025, 2, 1))  # a thermal failure, as the report's categories count it
    ticket(other, "xid_ecc", t(2024, 6, 1), code=48)  # before the period
    body = get(client_for(viewer)).json()
    assert row_of(body, gpu)["hardware_tickets"] == 4
    assert row_of(body, other)["hardware_tickets"] == 0


def test_models_and_fleet_sum_then_apply_the_formulas(client_for, viewer):
    host = HostFactory(hostname="dgx-01")
    a = gpu_at(t(2024, 1, 1), host=host, model="A100")
    b = gpu_at(t(2024, 1, 1), host=host, model="A100", install_date=dt.date(2025, 7, 1))
    c = gpu_at(t(2024, 1, 1), model="H100")
    repair(a, t(2025, 5, 1), downtime=10, cost=100)
    repair(b, t(2025, 8, 1), downtime=20, cost=50.25)
    body = get(client_for(viewer)).json()
    models = {m["model"]: m for m in body["models"]}
    service_a100 = YEAR_H + 184 * 24
    assert models["A100"]["gpus"] == 2
    assert models["A100"]["service_hours"] == pytest.approx(service_a100)
    assert (models["A100"]["repairs"], models["A100"]["downtime_hours"], models["A100"]["cost"]) == (2, 30.0, 150.25)
    assert models["A100"]["mtbf_hours"] == pytest.approx(service_a100 / 2)
    assert models["A100"]["mttr_hours"] == pytest.approx(15.0)
    assert models["A100"]["availability"] == pytest.approx(service_a100 / (service_a100 + 30))
    assert models["H100"]["mtbf_hours"] is None and models["H100"]["mttr_hours"] is None
    fleet = body["fleet"]
    assert fleet["gpus"] == 3 and fleet["service_hours"] == pytest.approx(service_a100 + YEAR_H)
    assert fleet["mtbf_hours"] == pytest.approx((service_a100 + YEAR_H) / 2)
    assert set(fleet) >= {"gpus", "service_hours", "repairs", "downtime_hours", "cost", "mtbf_hours", "mttr_hours",
                          "availability"}  # fmt: skip
    # Filters: host exactly, model exactly (not a substring), and the sums cover only the listed GPUs.
    only_host = get(client_for(viewer), host="dgx-01").json()
    assert {r["uuid"] for r in only_host["gpus"]} == {a.uuid, b.uuid} and only_host["fleet"]["gpus"] == 2
    assert get(client_for(viewer), model="A10").json()["fleet"]["gpus"] == 0
    assert [r["uuid"] for r in get(client_for(viewer), model="H100").json()["gpus"]] == [c.uuid]


def test_offsets_other_than_utc(client_for, viewer):
    gpu = gpu_at(t(2024, 1, 1))
    repair(gpu, t(2024, 12, 31, 23, 30))  # inside when `from` is 2025-01-01T00:00+01:00 (23:00 UTC)
    body = (
        client_for(viewer)
        .get("/api/v1/reports/reliability", {"from": "2025-01-01T00:00:00+01:00", "to": "2025-01-02T00:00:00+01:00"})
        .json()
    )
    row = row_of(body, gpu)
    assert row["repairs"] == 1 and row["service_hours"] == pytest.approx(24)


@pytest.mark.parametrize(
    "params, loc",
    [
        ({"from": None}, "from"),
        ({"to": None}, "to"),
        ({"from": "2025-01-01T00:00:00"}, "from"),  # no zone
        ({"to": "2026-01-01"}, "to"),  # a date has no zone
        ({"from": "yesterday"}, "from"),
        ({"to": "2024-01-01T00:00:00Z"}, "to"),  # before from
        ({"format": "xml"}, "format"),
    ],
)
def test_bad_input_400_names_the_field(client_for, viewer, params, loc):
    query = {k: v for k, v in {**PARAMS, **params}.items() if v is not None}
    response = client_for(viewer).get("/api/v1/reports/reliability", query)
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]


def test_roles(client_for, actors):
    for role in ("admin", "technician", "viewer"):
        assert get(client_for(actors[role])).status_code == 200, role
    assert get(client_for(actors["outsider"])).status_code == 403
    assert get(client_for(None)).status_code == 401


def test_csv_has_exactly_the_contract_columns(client_for, viewer):
    gpu = gpu_at(t(2024, 1, 1))
    repair(gpu, t(2025, 3, 1), downtime=4)
    quiet = gpu_at(t(2024, 1, 1))
    response = get(client_for(viewer), format="csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(rows[0]) == [
        "uuid",
        "hostname",
        "index",
        "model",
        "serial",
        "service_hours",
        "repairs",
        "downtime_hours",
        "cost",
        "mtbf_hours",
        "mttr_hours",
        "availability",
        "hardware_tickets",
    ]
    by_uuid = {r["uuid"]: r for r in rows}
    assert float(by_uuid[gpu.uuid]["service_hours"]) == pytest.approx(YEAR_H)
    assert (by_uuid[gpu.uuid]["repairs"], float(by_uuid[gpu.uuid]["mttr_hours"])) == ("1", 4.0)
    assert by_uuid[quiet.uuid]["mtbf_hours"] == "" and by_uuid[quiet.uuid]["mttr_hours"] == ""  # null: empty cell


def test_pdf_lists_every_gpu_by_serial_with_its_repairs(client_for, viewer):
    gpu = gpu_at(t(2024, 1, 1), serial="SN-REPAIRED-1")
    gpu_at(t(2024, 1, 1), serial="SN-QUIET-2")
    record = repair(gpu, t(2025, 3, 1), downtime=4, cost=120)
    MaintenanceRecord.objects.filter(pk=record.pk).update(rma_number="RMA-4242")
    response = get(client_for(viewer), format="pdf")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF-")
    text = " ".join(page.extract_text() for page in PdfReader(io.BytesIO(response.content)).pages)
    for needle in ("SN-REPAIRED-1", "SN-QUIET-2", "RMA-4242", "2025-01-01", "charlie", "Fleet"):
        assert needle in text, needle
