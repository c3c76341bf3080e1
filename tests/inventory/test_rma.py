"""RMA cases: open (technicians), forward-only transitions (409 otherwise), `covered`,
`turnaround_days`, the card swap that links `replacement_gpu`, the RMA pack's cases and the
reliability report's `rma` per vendor."""

import datetime as dt
import io

import pytest
from auditlog.models import LogEntry
from django.utils import timezone
from pypdf import PdfReader

from portal.fleet.models import Gpu, MaintenanceRecord
from portal.fleet.services import gpu_status_set
from portal.fleet.swaps import gpu_swap_record
from portal.inventory.models import RmaCase, Warranty
from portal.inventory.services import rma
from tests.factories import GpuFactory
from tests.inventory.conftest import api

pytestmark = pytest.mark.django_db


def open_body(subject, **changes):
    return {"gpu": subject.uuid, "vendor": "NVIDIA", "case_number": "RMA-4471", "notes": "XID 79 twice", **changes}


def test_technician_opens_a_case(client_for, technician, viewer, gpu):
    response = api(client_for(technician), "post", "/rma-cases", open_body(gpu))
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["gpu"] == gpu.uuid and data["state"] == "open" and data["covered"] is False
    assert data["turnaround_days"] is None and data["replacement_gpu"] is None and data["shipped_at"] is None
    assert api(client_for(viewer), "get", f"/rma-cases/{data['id']}").json() == data
    assert api(client_for(viewer), "get", "/rma-cases?state=open&vendor=nvidia").json()["count"] == 1
    assert api(client_for(viewer), "get", "/rma-cases?state=closed").json()["count"] == 0
    assert api(client_for(viewer), "get", f"/rma-cases?gpu={gpu.uuid}").json()["count"] == 1


def test_covered_when_a_warranty_covered_the_gpu_at_opening(client_for, technician, gpu):
    today = timezone.localdate()
    warranty = Warranty.objects.create(
        vendor="Dell", contract="PS-1", coverage="parts", starts_on=today - dt.timedelta(days=10),
        ends_on=today + dt.timedelta(days=300),
    )  # fmt: skip
    warranty.hosts.set([gpu.host])
    assert api(client_for(technician), "post", "/rma-cases", open_body(gpu)).json()["covered"] is True


def test_viewers_read_only(client_for, viewer, outsider, gpu):
    assert api(client_for(viewer), "post", "/rma-cases", open_body(gpu)).status_code == 403
    assert api(client_for(outsider), "get", "/rma-cases").status_code == 403
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-1")
    assert api(client_for(viewer), "post", f"/rma-cases/{case.pk}/transition", {"state": "shipped"}).status_code == 403


@pytest.mark.parametrize(
    "change, loc",
    [
        ({"gpu": "GPU-unknown"}, "gpu"),
        ({"vendor": ""}, "vendor"),
        ({"case_number": " "}, "case_number"),
        ({"ticket": 999999}, "ticket"),
        ({"ticket": "seven"}, "ticket"),
        ({"state": "closed"}, "state"),
    ],
)
def test_bad_case_is_a_400_naming_the_field(client_for, technician, gpu, change, loc):
    response = api(client_for(technician), "post", "/rma-cases", open_body(gpu, **change))
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    assert not RmaCase.objects.exists()


def test_the_same_vendor_case_twice_is_a_409(client_for, technician, gpu):
    api(client_for(technician), "post", "/rma-cases", open_body(gpu))
    response = api(client_for(technician), "post", "/rma-cases", open_body(gpu))
    assert response.status_code == 409 and response.json()["detail"][0]["loc"] == "case_number"


def move(client, case, **body):
    return api(client, "post", f"/rma-cases/{case.pk}/transition", body)


def test_forward_through_replacement_received_with_turnaround(client_for, technician, gpu):
    client = client_for(technician)
    opened = timezone.now() - dt.timedelta(days=12)
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-2", at=opened)
    response = move(client, case, state="shipped", tracking="1Z999AA10123456784")
    assert response.status_code == 200, response.content
    assert response.json()["tracking"] == "1Z999AA10123456784" and response.json()["shipped_at"]
    response = move(client, case, state="replacement_received", replacement_serial="1650724999999")
    data = response.json()
    assert data["state"] == "replacement_received" and data["replacement_serial"] == "1650724999999"
    assert 11.9 <= data["turnaround_days"] <= 12.1
    assert move(client, case, state="closed").json()["closed_at"]


@pytest.mark.parametrize(
    "path, wanted",
    [
        ([], "replacement_received"),
        ([], "closed"),
        ([], "open"),
        (["shipped"], "open"),
        (["shipped", "replacement_received"], "rejected"),
        (["rejected"], "shipped"),
        (["shipped", "replacement_received", "closed"], "closed"),
    ],
)
def test_anything_but_forward_is_a_409_naming_state(client_for, technician, gpu, path, wanted):
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-3")
    for state in path:
        case = rma.rma_case_transition(case=case, state=state)
    response = move(client_for(technician), case, state=wanted)
    assert response.status_code == 409, response.content
    assert response.json()["detail"][0]["loc"] == "state"
    assert RmaCase.objects.get().state == case.state


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"state": "lost"}, "state"),
        ({}, "state"),
        ({"state": "rejected", "tracking": "1Z"}, "tracking"),
        ({"state": "shipped", "replacement_serial": "123"}, "replacement_serial"),
        ({"state": "shipped", "tracking": "x" * 201}, "tracking"),
        ({"state": "shipped", "carrier": "UPS"}, "carrier"),
    ],
)
def test_bad_transition_is_a_400(client_for, technician, gpu, body, loc):
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-4")
    response = move(client_for(technician), case, **body)
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    assert RmaCase.objects.get().state == "open"


def test_unknown_case_is_a_404(client_for, technician):
    assert api(client_for(technician), "get", "/rma-cases/999999").status_code == 404
    assert api(client_for(technician), "post", "/rma-cases/999999/transition", {"state": "shipped"}).status_code == 404


def test_a_card_swap_bringing_the_replacement_serial_links_it(gpu, django_capture_on_commit_callbacks):
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-5")
    case = rma.rma_case_transition(case=case, state="shipped")
    case = rma.rma_case_transition(case=case, state="replacement_received", replacement_serial="1650724888888")
    assert case.replacement_gpu is None
    gpu_status_set(gpu=gpu, status=Gpu.Status.OUT_FOR_REPAIR)
    new = GpuFactory(host=gpu.host, serial="1650724888888", pci_bus_id=gpu.pci_bus_id, index=0)
    with django_capture_on_commit_callbacks(execute=True):
        swap = gpu_swap_record(old_gpu=gpu, new_gpu=new, repair=None, at=timezone.now())
    assert swap is not None
    case.refresh_from_db()
    assert case.replacement_gpu == new


def test_a_replacement_already_in_the_fleet_is_linked_at_once(gpu):
    new = GpuFactory(serial="1650724777777")
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-6")
    case = rma.rma_case_transition(case=case, state="shipped")
    case = rma.rma_case_transition(case=case, state="replacement_received", replacement_serial="1650724777777")
    assert case.replacement_gpu == new


def test_the_rma_pack_lists_the_cases_in_json_and_pdf(client_for, viewer, gpu):
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA <b>", case_number="R-<7>")
    rma.rma_case_transition(case=case, state="shipped", tracking="1Z")
    response = client_for(viewer).get(f"/api/v1/gpus/{gpu.uuid}/rma-pack")
    assert response.status_code == 200, response.content
    cases = response.json()["rma_cases"]
    assert [(c["case_number"], c["state"], c["tracking"]) for c in cases] == [("R-<7>", "shipped", "1Z")]
    assert response.json()["gpu"]["uuid"] == gpu.uuid
    assert client_for(viewer).get("/api/v1/gpus/GPU-nope/rma-pack").status_code == 404
    pdf = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.pdf")
    assert pdf.status_code == 200
    text = "".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf.content)).pages)
    assert "RMA cases" in text and "R-<7>" in text and "NVIDIA <b>" in text


def test_the_reliability_report_adds_rma_per_vendor(client_for, viewer, gpu):
    now = timezone.now()
    for number, (vendor, days, end) in enumerate(
        [("NVIDIA", 10, "closed"), ("NVIDIA", 20, "replacement_received"), ("NVIDIA", None, "rejected"),
         ("Dell", 4, "closed")]
    ):  # fmt: skip
        case = rma.rma_case_create(
            gpu=gpu.uuid, vendor=vendor, case_number=f"C-{number}", at=now - dt.timedelta(days=30)
        )
        if end == "rejected":
            rma.rma_case_transition(case=case, state="rejected")
            continue
        case = rma.rma_case_transition(case=case, state="shipped", at=now - dt.timedelta(days=29))
        received = now - dt.timedelta(days=30 - days)
        case = rma.rma_case_transition(case=case, state="replacement_received", at=received)
        if end == "closed":
            rma.rma_case_transition(case=case, state="closed")
    start = (now - dt.timedelta(days=60)).isoformat()
    response = client_for(viewer).get("/api/v1/reports/reliability", {"from": start, "to": now.isoformat()})
    assert response.status_code == 200, response.content
    assert response.json()["rma"] == [
        {"vendor": "Dell", "opened": 1, "closed": 1, "rejected": 0, "median_turnaround_days": 4.0},
        {"vendor": "NVIDIA", "opened": 3, "closed": 1, "rejected": 1, "median_turnaround_days": 15.0},
    ]
    period = {"from": now.isoformat(), "to": (now + dt.timedelta(days=1)).isoformat()}
    later = client_for(viewer).get("/api/v1/reports/reliability", period)
    assert later.json()["rma"] == []


def test_cases_survive_a_repair_record_of_the_gpu(gpu):
    MaintenanceRecord.objects.create(kind="repair", host=gpu.host, gpu=gpu, performed_at=timezone.now(),
                                     vendor="NVIDIA", rma_number="R-8", outcome="pending")  # fmt: skip
    assert rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-8").state == "open"


def test_each_move_is_in_the_audit_trail_with_who_made_it(client_for, technician, gpu):
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="R-9")
    move(client_for(technician), case, state="shipped", tracking="1Z")
    line = LogEntry.objects.get_for_object(case).filter(action=LogEntry.Action.UPDATE).get()
    assert line.actor == technician
    assert line.changes["state"] == ["open", "shipped"] and line.changes["tracking"] == ["", "1Z"]


def test_the_reliability_page_shows_rma_per_vendor(client_for, viewer, gpu):
    rma.rma_case_create(gpu=gpu.uuid, vendor="Vendor <i>", case_number="P-1")
    page = client_for(viewer).get("/reports/reliability").content.decode()
    assert "RMA cases per vendor" in page and "Vendor &lt;i&gt;" in page
    zh = client_for(viewer).get("/reports/reliability", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "各厂商的 RMA 案例" in zh


@pytest.mark.parametrize(
    "url, loc",
    [
        ("/rma-cases?state=lost", "state"),
        ("/rma-cases?limit=0", "limit"),
        ("/rma-cases/abc", "case_id"),
        ("/parts?offset=-1", "offset"),
        ("/warranties?limit=1001", "limit"),
    ],
)
def test_bad_reads_are_400_naming_the_parameter(client_for, viewer, url, loc):
    response = api(client_for(viewer), "get", url)
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
