"""Spare parts and stock (portal-api-v1.md, "Spare parts, warranties and RMA cases"): parts,
movements, a record's parts_used in one transaction, the "Spare stock low" ticket, roles."""

import pytest

from portal.fleet.models import MaintenanceRecord
from portal.inventory.models import Part, StockMovement
from portal.inventory.services import stock
from portal.maintenance.models import Ticket
from tests.inventory.conftest import api

pytestmark = pytest.mark.django_db

FAN = {"name": "Fan module 92 mm", "kind": "fan", "part_number": "FAN-92", "location": "Shelf B2", "reorder_at": 2}


def test_technician_adds_a_part_with_none_on_hand(client_for, technician):
    response = api(client_for(technician), "post", "/parts", FAN)
    assert response.status_code == 201, response.content
    assert response.json() == {**FAN, "id": Part.objects.get().pk, "on_hand": 0}
    listed = api(client_for(technician), "get", "/parts").json()
    assert listed["count"] == 1 and listed["items"][0]["name"] == FAN["name"]


@pytest.mark.parametrize(
    "change, loc",
    [
        ({"kind": "flux_capacitor"}, "kind"),
        ({"reorder_at": -1}, "reorder_at"),
        ({"reorder_at": "2"}, "reorder_at"),
        ({"name": ""}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_part_is_a_400_naming_the_field(client_for, technician, change, loc):
    response = api(client_for(technician), "post", "/parts", {**FAN, **change})
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    assert not Part.objects.exists()


def test_a_name_taken_is_a_400(client_for, technician):
    api(client_for(technician), "post", "/parts", FAN)
    response = api(client_for(technician), "post", "/parts", {**FAN, "name": FAN["name"].upper()})
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "name"


def test_roles(client_for, viewer, outsider, technician):
    assert api(client_for(viewer), "post", "/parts", FAN).status_code == 403
    assert api(client_for(outsider), "get", "/parts").status_code == 403
    assert api(client_for(), "get", "/parts").status_code == 401
    assert api(client_for(viewer), "get", "/parts").status_code == 200
    part = stock.part_create(**FAN)
    assert (
        api(client_for(viewer), "post", f"/parts/{part.pk}/movements", {"delta": 1, "reason": "received"}).status_code
        == 403
    )
    assert not StockMovement.objects.exists()


@pytest.fixture
def fan(db):
    return stock.part_create(**FAN)


def test_movements_answer_the_stock_after_them(client_for, technician, fan):
    client = client_for(technician)
    response = api(client, "post", f"/parts/{fan.pk}/movements", {"delta": 5, "reason": "received", "notes": "PO 7"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body == {"id": body["id"], "part": fan.pk, "delta": 5, "reason": "received", "record": None, "on_hand": 5}
    response = api(client, "post", f"/parts/{fan.pk}/movements", {"delta": -2, "reason": "used"})
    assert response.json()["on_hand"] == 3


def test_a_movement_below_zero_is_a_409_naming_delta_and_writes_nothing(client_for, technician, fan):
    client = client_for(technician)
    api(client, "post", f"/parts/{fan.pk}/movements", {"delta": 1, "reason": "received"})
    response = api(client, "post", f"/parts/{fan.pk}/movements", {"delta": -2, "reason": "used"})
    assert response.status_code == 409, response.content
    assert response.json()["detail"][0]["loc"] == "delta"
    fan.refresh_from_db()
    assert fan.on_hand == 1 and StockMovement.objects.count() == 1


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"delta": 0, "reason": "received"}, "delta"),
        ({"delta": 1.5, "reason": "received"}, "delta"),
        ({"delta": "3", "reason": "received"}, "delta"),
        ({"delta": 1, "reason": "found"}, "reason"),
        ({"delta": 1}, "reason"),
        ({"delta": 1, "reason": "received", "record": 999999}, "record"),
        ({"delta": 1, "reason": "received", "shelf": "B"}, "shelf"),
    ],
)
def test_bad_movement_is_a_400_naming_the_field(client_for, technician, fan, body, loc):
    response = api(client_for(technician), "post", f"/parts/{fan.pk}/movements", body)
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    assert not StockMovement.objects.exists()


def test_movement_of_an_unknown_part_is_a_404(client_for, technician):
    response = api(client_for(technician), "post", "/parts/999999/movements", {"delta": 1, "reason": "received"})
    assert response.status_code == 404


def record_body(gpu, parts_used):
    return {"kind": "fan_replacement", "host": gpu.host.hostname, "gpu": gpu.uuid, "part_used": "fan",
            "parts_used": parts_used}  # fmt: skip


def test_parts_used_on_a_record_are_written_with_it(client_for, technician, fan, gpu):
    stock.movement_record(part=fan, delta=4, reason="received")
    response = api(client_for(technician), "post", "/records", record_body(gpu, [{"part": fan.pk, "quantity": 2}]))
    assert response.status_code == 201, response.content
    record = MaintenanceRecord.objects.get()
    used = StockMovement.objects.get(reason="used")
    assert (used.record, used.delta, used.on_hand_after) == (record, -2, 2)
    fan.refresh_from_db()
    assert fan.on_hand == 2


def test_parts_used_short_is_a_409_and_writes_no_record(client_for, technician, fan, gpu):
    stock.movement_record(part=fan, delta=1, reason="received")
    other = stock.part_create(name="Riser x16", kind="riser")
    stock.movement_record(part=other, delta=5, reason="received")
    body = record_body(gpu, [{"part": other.pk, "quantity": 1}, {"part": fan.pk, "quantity": 2}])
    response = api(client_for(technician), "post", "/records", body)
    assert response.status_code == 409, response.content
    assert response.json()["detail"][0]["loc"] == "parts_used"
    assert not MaintenanceRecord.objects.exists()
    assert StockMovement.objects.filter(reason="used").count() == 0
    other.refresh_from_db()
    assert other.on_hand == 5


@pytest.mark.parametrize(
    "parts_used, loc",
    [
        ([], "parts_used"),
        ("fan", "parts_used"),
        ([{"part": 999999, "quantity": 1}], "parts_used.0.part"),
        ([{"part": "fan", "quantity": 1}], "parts_used.0.part"),
        ([{"part": None, "quantity": 0}], "parts_used.0.part"),
        ([{"part": 1, "quantity": 0}], "parts_used.0.quantity"),
        ([{"part": 1, "qty": 1}], "parts_used.0"),
    ],
)
def test_bad_parts_used_is_a_400_and_writes_no_record(client_for, technician, gpu, fan, parts_used, loc):
    response = api(client_for(technician), "post", "/records", record_body(gpu, parts_used))
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    assert not MaintenanceRecord.objects.exists()


def stock_tickets():
    return Ticket.objects.filter(rule="spare_stock_low")


def test_stock_low_ticket_opens_at_once_once_and_resolves_on_receipt(fan, gpu):
    stock.movement_record(part=fan, delta=4, reason="received")
    assert not stock_tickets().exists()
    stock.movement_record(part=fan, delta=-2, reason="used")  # 2 = reorder_at: low
    ticket = stock_tickets().get()
    assert ticket.title == "Spare stock low: Fan module 92 mm"
    assert ticket.severity == "info" and ticket.is_open
    stock.movement_record(part=fan, delta=-1, reason="used")
    assert stock_tickets().count() == 1
    stock.movement_record(part=fan, delta=1, reason="received")  # 2: still low
    ticket.refresh_from_db()
    assert ticket.is_open
    stock.movement_record(part=fan, delta=5, reason="received")  # 7 > 2
    ticket.refresh_from_db()
    assert ticket.state == "resolved" and ticket.auto_resolved
    stock.movement_record(part=fan, delta=-6, reason="used")
    assert stock_tickets().filter(state="open").count() == 1 and stock_tickets().count() == 2


def test_stock_ticket_is_shown_in_chinese(fan, gpu, client_for, viewer):
    stock.movement_record(part=fan, delta=1, reason="received")
    stock.movement_record(part=fan, delta=-1, reason="used")
    ticket = stock_tickets().get()
    client = client_for(viewer)
    page = client.get(ticket.get_absolute_url(), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "备件库存不足：Fan module 92 mm" in page
