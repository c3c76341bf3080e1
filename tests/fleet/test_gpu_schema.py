"""One GPU schema: GET /gpus, GET /gpus/{uuid} and PATCH /gpus/{uuid} answer the same fields,
the contract's `hostname` and `model` among them; `host` and `model_name` stay, marked deprecated
in the OpenAPI document. Every API time needs a zone (one type, ApiDateTime)."""

import json

import pytest

from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def gpu():
    return GpuFactory(host=HostFactory(hostname="node-a"), index=2, model_name="NVIDIA H200", notes="spare fan")


def test_get_list_get_detail_and_patch_answer_the_same_gpu(client_for, technician, gpu):
    client = client_for(technician)
    (listed,) = client.get("/api/v1/gpus", {"host": "node-a"}).json()["items"]
    detail = client.get(f"/api/v1/gpus/{gpu.uuid}").json()
    patched = client.patch(
        f"/api/v1/gpus/{gpu.uuid}", json.dumps({"install_date": "2024-02-01"}), content_type="application/json"
    ).json()
    assert set(listed) == set(detail) == set(patched)
    assert listed == detail
    assert patched == {**detail, "install_date": "2024-02-01"}
    assert (detail["hostname"], detail["host"], detail["model"], detail["model_name"]) == (
        "node-a", "node-a", "NVIDIA H200", "NVIDIA H200",
    )  # fmt: skip
    assert (detail["notes"], detail["latest"], detail["install_date"]) == ("spare fan", None, None)


def test_the_compatibility_fields_are_deprecated_in_openapi(client_for, viewer):
    document = client_for(viewer).get("/api/v1/openapi.json").json()
    schema = document["components"]["schemas"]["GpuOut"]["properties"]
    for old, new in (("host", "hostname"), ("model_name", "model")):
        assert schema[old]["deprecated"] is True and f"`{new}`" in schema[old]["description"]
        assert "deprecated" not in schema[new]
    operations = document["paths"]["/api/v1/gpus/{uuid}"]
    for method in ("get", "patch"):
        assert operations[method]["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/GpuOut"
        }


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        ("/api/v1/records", {"since": "2026-01-01T00:00:00"}, "since"),
        ("/api/v1/records", {"until": "2026-01-01"}, "until"),
        ("/api/v1/gpus/{uuid}/wear", {"from": "2026-01-01T00:00:00"}, "from"),
        ("/api/v1/gpus/{uuid}/readings", {"to": "2026-01-01T00:00:00"}, "to"),
        ("/api/v1/reports/reliability", {"from": "2026-01-01T00:00:00", "to": "2026-02-01T00:00:00Z"}, "from"),
    ],
)
def test_a_time_without_a_zone_is_a_400_naming_the_field(client_for, viewer, gpu, url, params, field):
    response = client_for(viewer).get(url.format(uuid=gpu.uuid), params)
    assert response.status_code == 400, response.content
    (problem,) = response.json()["detail"]
    assert problem["loc"] == field and "time zone" in problem["msg"]


def test_an_unencoded_plus_of_a_zone_offset_is_read_as_one(client_for, viewer, gpu):
    # "…+01:00" written into a URL by hand arrives as "… 01:00".
    url = f"/api/v1/gpus/{gpu.uuid}/wear?from=2026-01-01T00:00:00+01:00&to=2026-01-02T00:00:00+01:00"
    body = client_for(viewer).get(url).json()
    assert (body["from"], body["to"]) == ("2025-12-31T23:00:00Z", "2026-01-01T23:00:00Z")
