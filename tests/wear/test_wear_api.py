"""`GET /api/v1/gpus/{uuid}/wear`: the answer's shape, bad input, roles; and the meters kept from
ingest through the telemetry batch hook (late batch included)."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.telemetry import ingest_view
from portal.wear.models import WearHour, WearState
from tests.factories import GpuFactory
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch
from tests.telemetry.conftest import agent_for

FIELDS = {"uuid", "from", "to", "powered_hours", "busy_hours", "hot_hours", "fan_high_hours", "longest_busy_hours",
          "thermal_cycles", "energy_kwh"}  # fmt: skip


@pytest.fixture(autouse=True)
def _serial_ingest(settings, wear_on_ingest, monkeypatch):
    monkeypatch.setattr(ingest_view, "run_in_pool", False)
    ingest_view._limiter = None


@pytest.mark.django_db
def test_wear_of_a_gpu_without_readings_is_zeros_and_echoes_nulls(client_for, viewer):
    gpu = GpuFactory()
    body = client_for(viewer).get(f"/api/v1/gpus/{gpu.uuid}/wear").json()
    assert set(body) == FIELDS
    assert body["from"] is None and body["to"] is None
    assert body["thermal_cycles"] == 0 and body["busy_hours"] == 0 and body["energy_kwh"] == 0


@pytest.mark.django_db
def test_from_later_than_to_is_a_400_naming_from(client_for, viewer):
    gpu = GpuFactory()
    answer = client_for(viewer).get(
        f"/api/v1/gpus/{gpu.uuid}/wear", {"from": "2026-03-02T00:00:00Z", "to": "2026-03-01T00:00:00Z"}
    )
    assert answer.status_code == 400
    assert [d["loc"] for d in answer.json()["detail"]] == ["from"]


@pytest.mark.django_db
@pytest.mark.parametrize("params", [{"from": "yesterday"}, {"to": "2026-03-01T00:00:00"}])
def test_bad_times_are_400(client_for, viewer, params):
    gpu = GpuFactory()
    answer = client_for(viewer).get(f"/api/v1/gpus/{gpu.uuid}/wear", params)
    assert answer.status_code == 400
    assert answer.json()["detail"][0]["loc"] in {"from", "to", "query.from", "query.to"}


@pytest.mark.django_db
def test_roles_and_unknown_gpu(client_for, actors):
    gpu = GpuFactory()
    url = f"/api/v1/gpus/{gpu.uuid}/wear"
    assert client_for(None).get(url).status_code == 401
    assert client_for(actors["outsider"]).get(url).status_code == 403
    for role in ("viewer", "technician", "admin"):
        assert client_for(actors[role]).get(url).status_code == 200
    assert client_for(actors["viewer"]).get("/api/v1/gpus/GPU-nope/wear").status_code == 404


@pytest.mark.django_db
def test_meters_follow_ingest_including_a_late_batch(client_for, viewer, django_capture_on_commit_callbacks):
    agent = agent_for("dgx-wear")
    now = timezone.now().replace(microsecond=0)
    uuid = gpu_uuid(7)
    first = make_batch(agent.host.hostname, gpus=(uuid,), readings=10, now=now - dt.timedelta(seconds=100))
    second = make_batch(agent.host.hostname, gpus=(uuid,), readings=10, now=now)
    late = make_batch(agent.host.hostname, gpus=(uuid,), readings=10, now=now - dt.timedelta(seconds=50))
    for reading in late["readings"]:
        reading["utilization_gpu_pct"] = 0  # idle: the late stretch splits the busy run
    for batch in (first, second, late):
        with django_capture_on_commit_callbacks(execute=True):
            assert post_batch(agent.client, agent.token, batch).status_code == 202
    gpu = Gpu.objects.get(uuid=uuid)
    state = WearState.objects.get(gpu=gpu)
    # 30 readings 1 s apart in three stretches: 109..100 s, 59..50 s (idle, arriving last) and
    # 9..0 s before now; the gaps between (41 s) are covered too (≤ 120 s): 109 s powered, the
    # late stretch's 50 s (its first gap and nine seconds) not busy, the longest run 41 + 9 s.
    assert state.powered_s == pytest.approx(109.0)
    body = client_for(viewer).get(f"/api/v1/gpus/{uuid}/wear").json()
    assert body["busy_hours"] == pytest.approx(59 / 3600)
    assert body["longest_busy_hours"] == pytest.approx(50 / 3600)
    assert WearHour.objects.filter(gpu=gpu).exists()
