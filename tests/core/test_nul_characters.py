"""NUL characters (which PostgreSQL text cannot hold) are a 400 naming the field, never a 500,
on pages, the read API and ingest."""

import json

import pytest

from portal.telemetry import ingest_view
from portal.telemetry.models import IngestBatch
from portal.telemetry.services import host_token_issue
from tests.telemetry.batches import make_batch


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/search/?q=dgx%00", "query.q"),
        ("/api/v1/records?host=a%00b", "query.host"),
        ("/api/v1/gpus?model=%00", "query.model"),
        ("/audit/?query=x%00", "query.query"),
        ("/tickets/?host=x%00", "query.host"),
    ],
)
def test_nul_in_a_query_parameter_is_a_400_naming_it(client_for, viewer, path, field):
    response = client_for(viewer).get(path)
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == field


def test_nul_in_a_form_field_is_a_400_and_nothing_saved(client_for, admin):
    response = client_for(admin).post("/hosts/new/", {"hostname": "dgx\x0001", "status": "active"})
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "form.hostname"


def test_nul_in_an_ingest_string_is_a_400_naming_the_field(client, db, settings, monkeypatch):
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    token = host_token_issue(hostname="dgx-07", create_host=True).token
    batch = make_batch("dgx-07")
    batch["gpus"][0]["serial"] = "16507\x00"
    response = client.post(
        "/api/v1/ingest", json.dumps(batch), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "gpus.0.serial"
    assert not IngestBatch.objects.exists()
