"""POST /api/v1/records as the contract says: field names, 201 body, 400 naming the field, roles."""

import datetime as dt
import json

import pytest
from django.utils import timezone

from portal.fleet.models import MaintenanceRecord
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


def post(client, body, **headers):
    return client.post("/api/v1/records", json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def gpu():
    return GpuFactory(host=HostFactory(hostname="node-a"))


def test_backdated_repair_is_201_with_numbers(client_for, technician, gpu):
    body = {
        "kind": "repair", "host": "node-a", "gpu": gpu.uuid, "performed_at": "2019-03-01T09:30:00+01:00",
        "performed_by": "ACME", "notes": "from the paper log", "vendor": "ACME", "rma_number": "RMA-7",
        "parts": "fan", "cost": 180.5, "downtime_hours": 72, "outcome": "fixed",
    }  # fmt: skip
    response = post(client_for(technician), body)
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["kind"] == "repair" and data["host"] == "node-a" and data["gpu"] == gpu.uuid
    assert data["details"]["cost"] == 180.5 and data["cost"] == 180.5
    assert data["details"]["downtime_hours"] == 72.0
    assert dt.datetime.fromisoformat(data["performed_at"]) == dt.datetime(2019, 3, 1, 8, 30, tzinfo=dt.UTC)
    listed = client_for(technician).get("/api/v1/records?host=node-a").json()
    assert listed["count"] == 1
    assert listed["items"][0] == data


def test_host_wide_record_and_default_performer(client_for, technician, gpu):
    response = post(client_for(technician), {"kind": "cleaning", "host": "node-a", "dust_level": "light"})
    assert response.status_code == 201, response.content
    assert response.json()["gpu"] is None
    assert response.json()["performed_by"] == "bob"


@pytest.mark.parametrize(
    "change, loc",
    [
        ({"vendor": "ACME"}, "vendor"),  # another kind's field
        ({"colour": "red"}, "colour"),  # nobody's field
        ({"dust_level": None}, "dust_level"),  # required, missing
        ({"dust_level": "filthy"}, "dust_level"),
        ({"kind": "polishing"}, "kind"),
        ({"host": "nope"}, "host"),
        ({"gpu": "GPU-nope"}, "gpu"),
        ({"performed_at": "2030-01-01T00:00:00"}, "performed_at"),  # no zone
        ({"airflow_ok": "perhaps"}, "airflow_ok"),
    ],
)
def test_bad_input_is_400_naming_the_field(client_for, technician, gpu, change, loc):
    body = {"kind": "cleaning", "host": "node-a", "dust_level": "light", "performed_at": "2024-01-01T00:00:00Z"}
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    response = post(client_for(technician), body)
    assert response.status_code == 400, response.content
    assert loc in [d["loc"] for d in response.json()["detail"]]
    assert response.json()["error"]
    assert MaintenanceRecord.objects.count() == 0


def test_future_beyond_five_minutes_is_400(client_for, technician, gpu):
    soon = (timezone.now() + dt.timedelta(minutes=3)).isoformat()
    late = (timezone.now() + dt.timedelta(minutes=7)).isoformat()
    base = {"kind": "cleaning", "host": "node-a", "dust_level": "none"}
    assert post(client_for(technician), {**base, "performed_at": soon}).status_code == 201
    response = post(client_for(technician), {**base, "performed_at": late})
    assert response.status_code == 400
    assert [d["loc"] for d in response.json()["detail"]] == ["performed_at"]


def test_roles(client_for, actors, gpu):
    body = {"kind": "cleaning", "host": "node-a", "dust_level": "light"}
    assert post(client_for(actors["viewer"]), body).status_code == 403
    assert post(client_for(actors["outsider"]), body).status_code == 403
    assert post(client_for(None), body).status_code == 401
    assert MaintenanceRecord.objects.count() == 0
    assert post(client_for(actors["admin"]), body).status_code == 201


def test_in_openapi(client_for, viewer):
    paths = client_for(viewer).get("/api/v1/openapi.json").json()["paths"]
    assert {"201", "400", "403"} <= set(paths["/api/v1/records"]["post"]["responses"])
