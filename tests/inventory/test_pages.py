"""The stock, warranties and RMA pages: who sees and who writes, every form with bad input (400 or
409, nothing written), what people typed shown as data, the warranty panels, Chinese."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.inventory.models import Part, RmaCase, StockMovement, Warranty
from portal.inventory.services import rma, stock
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db

PAGES = ["/inventory/stock/", "/inventory/warranties/", "/inventory/rma/"]


@pytest.mark.parametrize("url", PAGES)
def test_viewers_read_outsiders_do_not(client_for, viewer, outsider, url):
    page = client_for(viewer).get(url)
    assert page.status_code == 200
    assert b'type="submit">' in page.content  # the filter / nothing else: no forms to write
    assert b'name="form"' not in page.content and b'id="open"' not in page.content
    assert client_for(outsider).get(url).status_code == 403


def test_viewer_posts_are_refused(client_for, viewer, gpu):
    client = client_for(viewer)
    assert client.post("/inventory/stock/", {"form": "part", "part-name": "Fan", "part-kind": "fan"}).status_code == 403
    assert client.post("/inventory/rma/", {"gpu": gpu.uuid, "vendor": "NV", "case_number": "1"}).status_code == 403
    assert not Part.objects.exists() and not RmaCase.objects.exists()


def test_technician_adds_a_part_and_records_a_receipt(client_for, technician):
    client = client_for(technician)
    response = client.post("/inventory/stock/", {"form": "part", "part-name": "Riser <x16>", "part-kind": "riser",
                                                 "part-reorder_at": "1", "part-location": "Shelf A"})  # fmt: skip
    assert response.status_code == 302
    part = Part.objects.get()
    response = client.post("/inventory/stock/", {"form": "movement", "move-part": part.pk, "move-delta": "3",
                                                 "move-reason": "received", "move-notes": "PO <b>9</b>"})  # fmt: skip
    assert response.status_code == 302
    part.refresh_from_db()
    assert part.on_hand == 3
    page = client.get("/inventory/stock/").content.decode()
    assert "Riser &lt;x16&gt;" in page and "PO &lt;b&gt;9&lt;/b&gt;" in page and "<b>9</b>" not in page


@pytest.mark.parametrize(
    "data, field",
    [
        ({"form": "part", "part-name": "", "part-kind": "fan", "part-reorder_at": "0"}, "name"),
        ({"form": "part", "part-name": "Fan", "part-kind": "warp", "part-reorder_at": "0"}, "kind"),
        ({"form": "part", "part-name": "Fan", "part-kind": "fan", "part-reorder_at": "-1"}, "reorder_at"),
        ({"form": "movement", "move-part": "999999", "move-delta": "1", "move-reason": "received"}, "part"),
        ({"form": "movement", "move-part": "{part}", "move-delta": "0", "move-reason": "received"}, "delta"),
        ({"form": "movement", "move-part": "{part}", "move-delta": "x", "move-reason": "received"}, "delta"),
        ({"form": "movement", "move-part": "{part}", "move-delta": "1", "move-reason": "stolen"}, "reason"),
    ],
)
def test_bad_stock_forms_are_400_with_the_field_marked(client_for, technician, data, field):
    part = stock.part_create(name="Existing fan", kind="fan")
    data = {key: value.replace("{part}", str(part.pk)) for key, value in data.items()}
    response = client_for(technician).post("/inventory/stock/", data)
    assert response.status_code == 400
    form = response.context["part_form"] if data["form"] == "part" else response.context["movement_form"]
    assert field in form.errors or form.non_field_errors()
    assert Part.objects.count() == 1 and not StockMovement.objects.exists()


def test_taking_more_than_on_hand_on_the_page_is_a_409(client_for, technician):
    part = stock.part_create(name="Fan", kind="fan")
    response = client_for(technician).post(
        "/inventory/stock/", {"form": "movement", "move-part": part.pk, "move-delta": "-1", "move-reason": "used"}
    )
    assert response.status_code == 409
    assert "delta" in response.context["movement_form"].errors
    assert not StockMovement.objects.exists()


def warranty_form(gpu, **changes):
    today = timezone.localdate()
    return {"vendor": "Lenovo", "contract": "LN-<1>", "coverage": "parts", "starts_on": str(today),
            "ends_on": str(today + dt.timedelta(days=500)), "hosts": "", "gpus": gpu.uuid, **changes}  # fmt: skip


def test_admin_records_a_contract_on_the_page(client_for, admin, technician, gpu):
    assert client_for(technician).post("/inventory/warranties/", warranty_form(gpu)).status_code == 403
    assert 'id="new-warranty"' not in client_for(technician).get("/inventory/warranties/").content.decode()
    response = client_for(admin).post("/inventory/warranties/", warranty_form(gpu, hosts="node-a, "))
    assert response.status_code == 302
    assert Warranty.objects.get().hosts.get().hostname == "node-a"
    assert "LN-&lt;1&gt;" in client_for(admin).get("/inventory/warranties/").content.decode()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"ends_on": "2020-01-01", "starts_on": "2021-01-01"}, "ends_on"),
        ({"gpus": "", "hosts": ""}, "hosts"),
        ({"hosts": "nowhere"}, "hosts"),
        ({"coverage": "all"}, "coverage"),
        ({"starts_on": "yesterday"}, "starts_on"),
        ({"vendor": ""}, "vendor"),
    ],
)
def test_bad_contract_forms_are_400(client_for, admin, gpu, changes, field):
    response = client_for(admin).post("/inventory/warranties/", warranty_form(gpu, **changes))
    assert response.status_code == 400
    form = response.context["form"]
    assert (field in form.errors) if field else form.non_field_errors()
    assert not Warranty.objects.exists()


def test_technician_opens_and_moves_a_case_on_the_pages(client_for, technician, viewer, gpu):
    client = client_for(technician)
    response = client.post("/inventory/rma/", {"gpu": gpu.uuid, "vendor": "NVIDIA", "case_number": "RMA-<9>"})
    assert response.status_code == 302
    case = RmaCase.objects.get()
    assert response["Location"] == case.get_absolute_url()
    assert client.post(case.get_absolute_url(), {"state": "shipped", "tracking": "1Z77"}).status_code == 302
    case.refresh_from_db()
    assert (case.state, case.tracking) == ("shipped", "1Z77")
    page = client_for(viewer).get(case.get_absolute_url()).content.decode()
    assert "RMA-&lt;9&gt;" in page and 'id="transition"' not in page
    assert client_for(viewer).post(case.get_absolute_url(), {"state": "rejected"}).status_code == 403


@pytest.mark.parametrize(
    "data, status, field",
    [
        ({"gpu": "GPU-none", "vendor": "NV", "case_number": "1"}, 400, "gpu"),
        ({"gpu": "{gpu}", "vendor": "", "case_number": "1"}, 400, "vendor"),
        ({"gpu": "{gpu}", "vendor": "NV", "case_number": "1", "ticket": "x"}, 400, "ticket"),
        ({"gpu": "{gpu}", "vendor": "NV", "case_number": "1", "ticket": "99999"}, 400, "ticket"),
        ({"gpu": "{gpu}", "vendor": "NVIDIA", "case_number": "DUP"}, 409, "case_number"),
    ],
)
def test_bad_case_forms(client_for, technician, gpu, data, status, field):
    rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="DUP")
    data = {key: value.replace("{gpu}", gpu.uuid) for key, value in data.items()}
    response = client_for(technician).post("/inventory/rma/", data)
    assert response.status_code == status
    assert field in response.context["form"].errors
    assert RmaCase.objects.count() == 1


@pytest.mark.parametrize(
    "data, status",
    [({"state": "closed"}, 409), ({"state": "lost"}, 400), ({"state": "rejected", "tracking": "1Z"}, 200)],
)
def test_bad_transition_forms(client_for, technician, gpu, data, status):
    case = rma.rma_case_create(gpu=gpu.uuid, vendor="NVIDIA", case_number="T-1")
    response = client_for(technician).post(case.get_absolute_url(), data)
    if status == 200:  # tracking is only taken with shipped: the form drops it, the move is fine
        assert response.status_code == 302
        return
    assert response.status_code == status
    assert "state" in response.context["form"].errors
    assert RmaCase.objects.get().state == "open"


def test_gpu_and_host_pages_show_coverage(client_for, viewer, gpu, host):
    today = timezone.localdate()
    uncovered = GpuFactory(host=host, index=1)
    warranty = Warranty.objects.create(vendor="Supermicro", contract="SM-<7>", coverage="parts_labour",
                                       starts_on=today, ends_on=today + dt.timedelta(days=200))  # fmt: skip
    warranty.gpus.set([gpu])
    client = client_for(viewer)
    page = client.get(gpu.get_absolute_url()).content.decode()
    assert 'Covered by <span translate="no">Supermicro SM-&lt;7&gt;</span> (parts and labour)' in page
    assert "No warranty contract covers this GPU today." in client.get(uncovered.get_absolute_url()).content.decode()
    host_page = client.get(host.get_absolute_url()).content.decode()
    assert "SM-&lt;7&gt;" in host_page and "Not covered today:" in host_page
    assert f'href="{uncovered.get_absolute_url()}"' in host_page
    zh = client.get(gpu.get_absolute_url(), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert '由 <span translate="no">Supermicro SM-&lt;7&gt;</span>（部件及人工）保修' in zh


def test_the_pages_in_chinese(client_for, admin):
    client = client_for(admin)
    assert "登记收货或出入库" not in client.get("/inventory/stock/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    stock.part_create(name="Fan", kind="fan", reorder_at=2)
    page = client.get("/inventory/stock/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "备件" in page and "登记收货或出入库" in page and "风扇" in page and "不足" in page
    assert "登记合同" in client.get("/inventory/warranties/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "开启 RMA 案例" in client.get("/inventory/rma/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()


def test_a_movement_names_its_record_by_kind_host_and_gpu_not_by_id(
    client_for, viewer, gpu, django_assert_max_num_queries
):
    from tests.factories import RecordFactory

    record = RecordFactory(gpu=gpu, kind="repair")
    part = Part.objects.create(name="PCIe riser", kind="riser", on_hand=2)
    stock.movement_record(part=part, delta=-1, reason="used", record=record)
    stock.movement_record(part=part, delta=-1, reason="used", record=RecordFactory(gpu=gpu, kind="repair"))
    client = client_for(viewer)
    client.get("/inventory/stock/")
    with django_assert_max_num_queries(12) as queries:
        page = client.get("/inventory/stock/").content.decode()
    assert not [q for q in queries.captured_queries if 'FROM "fleet_host"' in q["sql"]], "a query per record"
    assert f'href="{record.get_absolute_url()}">Repair · <span translate="no">node-a</span> GPU 0</a>' in page
    assert f">#{record.pk}<" not in page


def test_time_columns_name_the_zone_their_times_are_in(client_for, viewer, gpu):
    """The movements' times are shown in the portal's time zone, which their header names (it said
    "When (UTC)" whatever the zone); no page's time column is labelled with a fixed "(UTC)"."""
    from pathlib import Path

    from django.test import override_settings

    part = Part.objects.create(name="Fan", kind="fan", on_hand=0)
    stock.movement_record(part=part, delta=2, reason="received", at=dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC))
    with override_settings(TIME_ZONE="Asia/Shanghai"):
        page = client_for(viewer).get("/inventory/stock/").content.decode()
    assert "<th>When (Asia/Shanghai)</th>" in page and "2026-03-01 20:00" in page
    repo = Path(__file__).resolve().parents[2]
    templates = [*repo.glob("templates/**/*.html"), *repo.glob("portal/*/templates/**/*.html")]
    fixed = [str(path.relative_to(repo)) for path in templates if '(UTC)" %}</th>' in path.read_text()]
    assert fixed == [], fixed
