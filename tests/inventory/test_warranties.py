"""Warranty contracts (admins), `warranty` on the GPU API, the "Warranty ending" ticket once per
contract (at create when inside 60 days, else on the day it enters them), coverage on the pages."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.inventory.models import Warranty
from portal.inventory.services import warranties
from portal.maintenance.models import Ticket
from tests.factories import GpuFactory, HostFactory
from tests.inventory.conftest import api

pytestmark = pytest.mark.django_db


def today():
    return timezone.localdate()


def body(gpu, **changes):
    return {"vendor": "Supermicro", "contract": "SM-2025-114", "coverage": "parts_labour",
            "starts_on": str(today() - dt.timedelta(days=300)), "ends_on": str(today() + dt.timedelta(days=400)),
            "hosts": [], "gpus": [gpu.uuid], **changes}  # fmt: skip


def test_admin_records_a_contract_and_the_gpu_api_shows_it(client_for, admin, viewer, gpu):
    response = api(client_for(admin), "post", "/warranties", body(gpu))
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["gpus"] == [gpu.uuid] and data["hosts"] == [] and data["coverage"] == "parts_labour"
    assert api(client_for(viewer), "get", "/warranties").json()["count"] == 1
    shown = api(client_for(viewer), "get", f"/gpus/{gpu.uuid}").json()["warranty"]
    assert shown == {"vendor": "Supermicro", "contract": "SM-2025-114", "coverage": "parts_labour",
                     "ends_on": data["ends_on"]}  # fmt: skip
    assert not Ticket.objects.filter(rule="warranty_ending").exists()  # 400 days away


def test_a_host_contract_covers_its_gpus_and_an_ended_one_nothing(client_for, admin, viewer, gpu, host):
    other = GpuFactory(host=HostFactory(hostname="node-b"))
    api(client_for(admin), "post", "/warranties", body(gpu, gpus=[], hosts=["node-a"]))
    old = body(gpu, contract="OLD-1", gpus=[other.uuid], ends_on=str(today() - dt.timedelta(days=1)))
    assert api(client_for(admin), "post", "/warranties", old).status_code == 201
    assert api(client_for(viewer), "get", f"/gpus/{gpu.uuid}").json()["warranty"]["contract"] == "SM-2025-114"
    assert api(client_for(viewer), "get", f"/gpus/{other.uuid}").json()["warranty"] is None


def test_only_admins_record_contracts(client_for, technician, viewer, gpu):
    assert api(client_for(technician), "post", "/warranties", body(gpu)).status_code == 403
    assert api(client_for(viewer), "post", "/warranties", body(gpu)).status_code == 403
    assert api(client_for(technician), "get", "/warranties").status_code == 200
    assert not Warranty.objects.exists()


@pytest.mark.parametrize(
    "change, loc",
    [
        ({"ends_on": "2020-01-01", "starts_on": "2020-02-01"}, "ends_on"),
        ({"gpus": [], "hosts": []}, "hosts"),
        ({"hosts": ["no-such-host"]}, "hosts.0"),
        ({"gpus": ["GPU-nope"]}, "gpus.0"),
        ({"coverage": "everything"}, "coverage"),
        ({"vendor": ""}, "vendor"),
        ({"contract": "   "}, "contract"),
        ({"starts_on": "next week"}, "starts_on"),
        ({"ends_on": "2026-13-01"}, "ends_on"),
        ({"price": 10}, "price"),
    ],
)
def test_bad_contract_is_a_400_naming_the_field(client_for, admin, gpu, change, loc):
    response = api(client_for(admin), "post", "/warranties", body(gpu, **change))
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    assert not Warranty.objects.exists()


def test_the_same_contract_twice_is_a_400(client_for, admin, gpu):
    api(client_for(admin), "post", "/warranties", body(gpu))
    response = api(client_for(admin), "post", "/warranties", body(gpu))
    assert response.status_code == 400 and response.json()["detail"][0]["loc"] == "contract"


def ending_tickets():
    return Ticket.objects.filter(rule="warranty_ending")


def test_a_contract_recorded_inside_60_days_opens_its_ticket_once(client_for, admin, gpu):
    ends = today() + dt.timedelta(days=30)
    response = api(client_for(admin), "post", "/warranties", body(gpu, ends_on=str(ends)))
    assert response.status_code == 201
    ticket = ending_tickets().get()
    assert ticket.title == "Warranty ending: Supermicro SM-2025-114"
    assert ticket.severity == "warning"
    assert gpu.serial in ticket.events.get().note
    assert ticket.evidence["gpus"] == [gpu.uuid]
    warranties.warranties_ending_check()
    warranties.warranties_ending_check(today=today() + dt.timedelta(days=1))
    assert ending_tickets().count() == 1


def test_a_later_contract_gets_its_ticket_the_day_it_enters_60_days(client_for, admin, gpu):
    ends = today() + dt.timedelta(days=90)
    api(client_for(admin), "post", "/warranties", body(gpu, ends_on=str(ends)))
    assert warranties.warranties_ending_check(today=today() + dt.timedelta(days=29)) == []
    assert not ending_tickets().exists()
    warranty = Warranty.objects.get()
    assert warranties.warranties_ending_check(today=today() + dt.timedelta(days=30)) == [warranty.pk]
    ticket = ending_tickets().get()
    ticket.state = "resolved"
    ticket.save()
    assert warranties.warranties_ending_check(today=today() + dt.timedelta(days=31)) == []
    assert ending_tickets().count() == 1  # once per contract, even after its ticket is resolved


def test_the_beat_task_runs_the_check(client_for, admin, gpu):
    from portal.inventory.tasks import warranties_ending_check_task

    Warranty.objects.create(vendor="Dell", contract="D-1", coverage="parts", starts_on=today(),
                            ends_on=today() + dt.timedelta(days=10)).gpus.set([gpu])  # fmt: skip
    assert len(warranties_ending_check_task()) == 1
    assert ending_tickets().count() == 1


def test_the_gpu_list_shows_each_warranty_in_a_constant_number_of_queries(
    client_for, viewer, gpu, host, django_assert_num_queries
):
    warranty = Warranty.objects.create(vendor="HPE", contract="C-1", coverage="parts", starts_on=today(),
                                       ends_on=today() + dt.timedelta(days=90))  # fmt: skip
    warranty.hosts.set([host])
    client = client_for(viewer)
    client.get("/api/v1/gpus")  # the session and permissions cached alike for both counts
    with CaptureQueriesContext(connection) as small:
        items = client.get("/api/v1/gpus").json()["items"]
    assert [item["warranty"]["contract"] for item in items] == ["C-1"]
    for _ in range(6):
        GpuFactory(host=HostFactory())
    with django_assert_num_queries(len(small)):
        items = client.get("/api/v1/gpus").json()["items"]
    assert sorted(str(item["warranty"]) for item in items).count("None") == 6
