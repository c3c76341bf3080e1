"""Every row of ingest-v1's Answers table, and what each answer leaves in the database."""

import datetime as dt
import gzip
import json
import uuid as uuidlib

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.telemetry import ingest_view
from portal.telemetry.models import (
    READING_METRICS,
    THROTTLE_BIT,
    THROTTLE_REASONS,
    GpuLatest,
    HostToken,
    IngestBatch,
    Reading,
    XidEvent,
    throttle_names,
)
from portal.telemetry.services import host_token_revoke
from tests.telemetry.batches import gpu_uuid, make_batch, make_reading, post_batch

pytestmark = pytest.mark.django_db

A, B = gpu_uuid(1), gpu_uuid(2)
NULL_READING = dict.fromkeys(READING_METRICS)


def parse_ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def stored_metrics(reading: Reading) -> dict:
    return {name: getattr(reading, name) for name in READING_METRICS}


def expected_metrics(sent: dict) -> dict:
    expected = {name: sent[name] for name in READING_METRICS}
    reasons = sent["throttle_reasons"]
    expected["throttle_reasons"] = None if reasons is None else sum(THROTTLE_BIT[name] for name in set(reasons))
    return expected


# --- 202 stored ---------------------------------------------------------------------------


def test_stored_batch_answers_202_and_maps_every_field(agent, counts):
    now = timezone.now().replace(microsecond=0)
    batch = make_batch(agent.hostname, gpus=[A, B], readings=4, now=now)
    batch["readings"][1] = make_reading(
        B, parse_ts(batch["readings"][1]["ts"]),
        temperature_c=71, fan_speed_pct=55, power_w=650.5, power_limit_w=690.0, energy_mj=98765.5,
        utilization_gpu_pct=100, utilization_memory_pct=0, memory_used_mib=1, sm_clock_mhz=2100, mem_clock_mhz=2619,
        pstate=2, throttle_reasons=["hw_thermal", "gpu_idle", "display_clocks_setting"], ecc_corrected_volatile=7,
        ecc_uncorrected_volatile=1, ecc_uncorrected_aggregate=3, retired_pages_pending=True,
        remapped_rows_pending=True, remapped_rows_failure=False, pcie_link_gen=4, pcie_link_width=8,
        pcie_replay_count=12,
        xid_events=[{"ts": batch["readings"][1]["ts"], "code": 79}, {"ts": batch["readings"][1]["ts"], "code": 48}],
    )  # fmt: skip
    batch["readings"][2] = make_reading(A, parse_ts(batch["readings"][2]["ts"]), **NULL_READING)
    batch["readings"][3]["throttle_reasons"] = []

    response = agent.post(batch)

    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 4, "duplicate": False}
    assert response["Content-Type"] == "application/json"
    gpus = {gpu.uuid: gpu for gpu in Gpu.objects.filter(host=agent.host)}
    assert set(gpus) == {A, B}
    stored = list(Reading.objects.order_by("ts", "gpu__uuid"))
    sent = sorted(batch["readings"], key=lambda r: (r["ts"], r["gpu_uuid"]))
    assert len(stored) == 4
    for row, reading in zip(stored, sent, strict=True):
        assert row.gpu_id == gpus[reading["gpu_uuid"]].pk
        assert row.ts == parse_ts(reading["ts"])
        assert stored_metrics(row) == expected_metrics(reading)
        assert row.xid_count == len(reading["xid_events"])
    full = Reading.objects.get(gpu=gpus[B], temperature_c=71)
    assert throttle_names(full.throttle_reasons) == ["gpu_idle", "hw_thermal", "display_clocks_setting"]
    assert full.throttle_reasons == 1 | (1 << 6) | (1 << 8)
    # null means "not supported": it stays null, never zero
    empty = Reading.objects.get(gpu=gpus[A], ts=parse_ts(batch["readings"][2]["ts"]))
    assert stored_metrics(empty) == NULL_READING
    assert Reading.objects.get(gpu=gpus[B], throttle_reasons=0).throttle_reasons == 0  # [] is "none", not null
    assert throttle_names(0) == []
    assert sorted(XidEvent.objects.values_list("gpu__uuid", "code")) == [(B, 48), (B, 79)]
    stored_batch = IngestBatch.objects.get()
    assert str(stored_batch.batch_id) == batch["batch_id"]
    assert stored_batch.host == agent.host and stored_batch.reading_count == 4
    assert stored_batch.first_ts == parse_ts(batch["readings"][0]["ts"])
    assert stored_batch.last_ts == now and stored_batch.sent_at == now
    assert set(XidEvent.objects.values_list("batch_id", flat=True)) == {stored_batch.pk}
    latest_b = GpuLatest.objects.get(gpu=gpus[B])  # readings 3 (B) and 2 (A) are the newest, at `now`
    assert (latest_b.ts, latest_b.temperature_c, latest_b.power_w, latest_b.throttle_reasons) == (now, 64, 412.25, 0)
    latest_a = GpuLatest.objects.get(gpu=gpus[A])
    assert (latest_a.ts, latest_a.temperature_c, latest_a.power_w, latest_a.throttle_reasons) == (now, None, None, None)
    assert counts() == {"batches": 1, "readings": 4, "xids": 2, "latest": 2, "gpus": 2, "records": 0}


@pytest.mark.parametrize("name", THROTTLE_REASONS)
def test_each_throttle_reason_round_trips_through_the_bitmask(agent, name):
    batch = make_batch(agent.hostname, gpus=[A], readings=1)
    batch["readings"][0]["throttle_reasons"] = [name, name]  # repeated: still one bit
    assert agent.post(batch).status_code == 202
    mask = Reading.objects.get().throttle_reasons
    assert mask == THROTTLE_BIT[name]
    assert throttle_names(mask) == [name]


def test_gzip_body_is_accepted(agent, counts):
    batch = make_batch(agent.hostname, gpus=[A, B], readings=10)
    response = agent.post(batch, compress=True)
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 10, "duplicate": False}
    assert counts()["readings"] == 10


def test_empty_readings_with_inventory_is_stored(agent, counts):
    response = agent.post(make_batch(agent.hostname, gpus=[A], readings=0))
    assert response.status_code == 202
    assert response.json() == {"accepted": 0, "duplicate": False}
    assert counts() == {"batches": 1, "readings": 0, "xids": 0, "latest": 0, "gpus": 1, "records": 0}


# --- 200 duplicate ------------------------------------------------------------------------


def test_batch_sent_again_is_a_duplicate_and_writes_nothing_new(agent, counts):
    batch = make_batch(agent.hostname, gpus=[A, B], readings=6)
    batch["readings"][0]["xid_events"] = [{"ts": batch["readings"][0]["ts"], "code": 13}]
    assert agent.post(batch).status_code == 202
    before = counts()

    again = agent.post(batch)
    assert again.status_code == 200
    assert again.json() == {"accepted": 0, "duplicate": True}
    # the same batch_id with different content (new GPU, new driver) still writes nothing
    changed = make_batch(agent.hostname, gpus=[A, B, gpu_uuid(3)], readings=9, batch_id=batch["batch_id"])
    changed["host"]["driver_version"] = "590.1"
    answer = agent.post(changed, compress=True)
    assert (answer.status_code, answer.json()) == (200, {"accepted": 0, "duplicate": True})
    assert counts() == before
    agent.host.refresh_from_db()
    assert agent.host.driver_version == "580.65.06"


# --- 400 ----------------------------------------------------------------------------------


def test_wrong_type_is_400_with_the_field_location(agent, counts):
    batch = make_batch(agent.hostname, gpus=[A], readings=5)
    batch["readings"][3]["temperature_c"] = "64"
    response = agent.post(batch)
    assert response.status_code == 400
    body = response.json()
    assert body["error"]
    assert [item["loc"] for item in body["detail"]] == ["readings.3.temperature_c"]
    assert body["detail"][0]["msg"]
    assert counts() == {"batches": 0, "readings": 0, "xids": 0, "latest": 0, "gpus": 0, "records": 0}


@pytest.mark.parametrize(
    ("jobs", "loc"),
    [(["slurm:1"] * 17, "readings.1.jobs"), (["slurm:1", "alice"], "readings.1.jobs.1"),
     (["user:two words"], "readings.1.jobs.0"), (["user:" + "x" * 124], "readings.1.jobs.0"),
     ("slurm:1", "readings.1.jobs")],
)  # fmt: skip
def test_a_bad_job_key_is_400_naming_it_and_stores_nothing(agent, counts, jobs, loc):
    batch = make_batch(agent.hostname, gpus=[A], readings=3)
    batch["readings"][0]["jobs"] = ["slurm:4242", "user:alice", "k8s:vision/trainer-0"]
    batch["readings"][1]["jobs"] = jobs
    response = agent.post(batch)
    assert response.status_code == 400
    assert loc in [item["loc"] for item in response.json()["detail"]]
    assert counts() == {"batches": 0, "readings": 0, "xids": 0, "latest": 0, "gpus": 0, "records": 0}


def test_readings_with_jobs_and_without_are_both_stored(agent, counts):
    batch = make_batch(agent.hostname, gpus=[A], readings=3)
    batch["readings"][0]["jobs"] = ["slurm:4242", "user:alice"]
    batch["readings"][1]["jobs"] = []
    response = agent.post(batch)
    assert (response.status_code, response.json()["accepted"]) == (202, 3)
    assert counts()["readings"] == 3


def test_malformed_json_is_400(agent, counts):
    response = agent.post(body=b'{"batch_id": ')
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "body"
    assert counts()["batches"] == 0


# --- 401 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer gfh_" + "x" * 43,
        "Bearer not-a-host-token",
        "Basic dXNlcjpwYXNz",
    ],
    ids=["missing", "empty", "no-secret", "unknown", "no-prefix", "basic"],
)
def test_missing_or_wrong_token_is_401(agent, counts, authorization):
    batch = make_batch(agent.hostname, gpus=[A])
    headers = {} if authorization is None else {"authorization": authorization}
    response = post_batch(agent.client, None, batch, **headers)
    assert response.status_code == 401
    assert set(response.json()) == {"error"}
    assert counts()["batches"] == 0


def test_token_of_the_right_secret_with_another_scheme_is_401(agent, counts):
    response = agent.post(make_batch(agent.hostname, gpus=[A]), scheme="Token")
    assert response.status_code == 401
    assert counts()["batches"] == 0


def test_revoked_token_is_401(agent, counts):
    assert agent.post(make_batch(agent.hostname, gpus=[A])).status_code == 202
    host_token_revoke(token=HostToken.objects.get(pk=agent.record.pk))
    before = counts()
    response = agent.post(make_batch(agent.hostname, gpus=[A]))
    assert response.status_code == 401
    assert "error" in response.json()
    assert counts() == before


# --- 403 ----------------------------------------------------------------------------------


def test_gpu_of_another_host_is_403(agent, other_agent, counts):
    assert other_agent.post(make_batch(other_agent.hostname, gpus=[B])).status_code == 202
    before = counts()
    # in the inventory
    response = agent.post(make_batch(agent.hostname, gpus=[A, B], readings=2))
    assert response.status_code == 403
    assert list(response.json()) == ["error"]  # the protocol's 403 carries the error alone
    assert B in response.json()["error"]
    # only in the readings (the host does not list it)
    only_reading = make_batch(agent.hostname, gpus=[A], readings=1)
    only_reading["readings"].append(make_reading(B, timezone.now()))
    assert agent.post(only_reading).status_code == 403
    assert counts() == before
    assert Gpu.objects.get(uuid=B).host == other_agent.host
    assert not Gpu.objects.filter(uuid=A).exists()


def test_hostname_in_body_not_the_tokens_host_is_403(agent, other_agent, counts):
    response = agent.post(make_batch(other_agent.hostname, gpus=[A]))
    assert response.status_code == 403
    assert list(response.json()) == ["error"]
    assert counts() == {"batches": 0, "readings": 0, "xids": 0, "latest": 0, "gpus": 0, "records": 0}


# --- 413 ----------------------------------------------------------------------------------


def test_body_over_one_mib_is_413(agent, counts):
    batch = make_batch(agent.hostname, gpus=[A])
    batch["padding"] = "x" * (2 * 1024 * 1024)  # unknown fields are ignored, but not their size
    response = agent.post(batch)
    assert response.status_code == 413
    assert "error" in response.json()
    assert counts()["batches"] == 0


def test_gzip_bomb_is_413(agent, counts):
    batch = make_batch(agent.hostname, gpus=[A])
    batch["padding"] = " " * (8 * 1024 * 1024)
    bomb = gzip.compress(json.dumps(batch).encode(), compresslevel=9)
    assert len(bomb) < 16 * 1024
    response = agent.post(body=bomb, content_encoding="gzip")
    assert response.status_code == 413
    assert "error" in response.json()
    assert counts()["batches"] == 0


def test_compressed_body_just_under_the_limit_is_accepted(agent, settings):
    batch = make_batch(agent.hostname, gpus=[A])
    raw = json.dumps(batch).encode()
    batch["padding"] = " " * (settings.INGEST_MAX_BODY_BYTES - len(raw) - 100)
    raw = json.dumps(batch).encode()
    assert len(raw) <= settings.INGEST_MAX_BODY_BYTES
    assert agent.post(body=gzip.compress(raw), content_encoding="gzip").status_code == 202


# --- 429 ----------------------------------------------------------------------------------


def test_rate_limited_is_429_with_retry_after(agent, other_agent, settings, counts):
    settings.INGEST_RATE_PER_S = 0.25
    settings.INGEST_RATE_BURST = 2
    assert agent.post(make_batch(agent.hostname, gpus=[A])).status_code == 202
    assert agent.post(make_batch(agent.hostname, gpus=[A])).status_code == 202
    before = counts()

    response = agent.post(make_batch(agent.hostname, gpus=[A]))

    assert response.status_code == 429
    assert "error" in response.json()
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 4
    assert counts() == before
    # the limit is per token: another host is not held back
    assert other_agent.post(make_batch(other_agent.hostname, gpus=[B])).status_code == 202


# --- other answers -------------------------------------------------------------------------


def test_get_is_405(agent):
    response = agent.client.get("/api/v1/ingest", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_batch_id_must_be_a_uuid(agent):
    batch = make_batch(agent.hostname, gpus=[A], batch_id="not-a-uuid")
    response = agent.post(batch)
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "batch_id"


@pytest.mark.django_db(transaction=True)
def test_production_path_runs_in_the_thread_pool_and_commits(transactional_db, settings, monkeypatch):
    """In production: the DB work runs on a pool thread, with its own connection."""
    from tests.telemetry.conftest import agent_for

    monkeypatch.setattr(ingest_view, "run_in_pool", True)
    agent = agent_for("dgx-prod")
    batch = make_batch(agent.hostname, gpus=[A, B], readings=20)
    response = agent.post(batch, compress=True)
    assert response.status_code == 202, response.content
    assert response.json() == {"accepted": 20, "duplicate": False}
    assert Reading.objects.filter(gpu__host=agent.host).count() == 20
    assert IngestBatch.objects.filter(batch_id=uuidlib.UUID(batch["batch_id"])).exists()
    assert agent.post(batch).status_code == 200
    bad = make_batch(agent.hostname, gpus=[A], readings=3)
    bad["readings"][2]["power_w"] = -1
    response = agent.post(bad)
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "readings.2.power_w"
    assert Reading.objects.count() == 20


@pytest.mark.django_db(transaction=True)
def test_a_pool_connection_that_just_served_a_batch_is_not_health_checked_again(transactional_db, monkeypatch):
    """Django checks a kept connection (SELECT 1) before each request's first query; a pool
    thread's connection that served a batch less than HEALTHY_FOR_S ago skips that round trip."""
    from django.db import connection

    monkeypatch.setattr(ingest_view, "run_in_pool", True)
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)  # kept, as in production
    connection.close()
    connection.ensure_connection()
    ingest_view._connection_end()  # a batch served just now
    ingest_view._connection_begin()
    assert connection.health_check_done  # no check before the next batch's first query
    monkeypatch.setattr(ingest_view, "HEALTHY_FOR_S", 0.0)
    ingest_view._connection_end()
    ingest_view._connection_begin()
    assert not connection.health_check_done  # idle longer than HEALTHY_FOR_S: checked as Django does
