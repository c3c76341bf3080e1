"""Bad input of every kind: a clear 4xx that names the field, and nothing stored at all.

"Nothing stored" is checked on every table a batch writes to (batches, readings, XID events,
latest state, GPUs, maintenance records) and on the host's agent-reported fields.
"""

import datetime as dt
import gzip
import json

import pytest
from django.utils import timezone

from portal.telemetry.models import HostToken
from portal.telemetry.services import host_token_revoke
from tests.telemetry.batches import gpu_uuid, iso, make_batch, make_gpu, make_reading

pytestmark = pytest.mark.django_db

A, B = gpu_uuid(1), gpu_uuid(2)
NOW = object()  # placeholder: the test's "now", filled in when the case runs


def _set(path, value):
    """A mutation that sets batch[path...] = value (value may be a callable of now)."""

    def mutate(batch, now):
        target = batch
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value(now) if callable(value) else value

    return mutate


def _delete(path):
    def mutate(batch, now):
        target = batch
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


# (id, mutation of a valid 3-reading batch over GPUs A and B, expected status, expected loc)
CASES = [
    # missing fields
    ("missing-batch_id", _delete(["batch_id"]), 400, "batch_id"),
    ("missing-sent_at", _delete(["sent_at"]), 400, "sent_at"),
    ("missing-host", _delete(["host"]), 400, "host"),
    ("missing-hostname", _delete(["host", "hostname"]), 400, "host.hostname"),
    ("missing-readings", _delete(["readings"]), 400, "readings"),
    ("missing-metric", _delete(["readings", 2, "temperature_c"]), 400, "readings.2.temperature_c"),
    ("missing-gpu_uuid", _delete(["readings", 1, "gpu_uuid"]), 400, "readings.1.gpu_uuid"),
    ("missing-ts", _delete(["readings", 0, "ts"]), 400, "readings.0.ts"),
    ("missing-gpu-index", _delete(["gpus", 1, "index"]), 400, "gpus.1.index"),
    ("missing-gpu-uuid", _delete(["gpus", 0, "uuid"]), 400, "gpus.0.uuid"),
    ("missing-xid-code", _set(["readings", 0, "xid_events"], lambda now: [{"ts": iso(now)}]), 400,
     "readings.0.xid_events.0.code"),
    # wrong types
    ("string-for-int", _set(["readings", 1, "temperature_c"], "64"), 400, "readings.1.temperature_c"),
    ("float-for-int", _set(["readings", 1, "temperature_c"], 64.5), 400, "readings.1.temperature_c"),
    ("string-for-float", _set(["readings", 0, "power_w"], "412.3"), 400, "readings.0.power_w"),
    ("int-for-bool", _set(["readings", 0, "retired_pages_pending"], 0), 400, "readings.0.retired_pages_pending"),
    ("bool-for-int", _set(["readings", 0, "pstate"], True), 400, "readings.0.pstate"),
    ("string-for-list", _set(["readings", 0, "throttle_reasons"], "sw_power_cap"), 400,
     "readings.0.throttle_reasons"),
    ("int-for-hostname", _set(["host", "hostname"], 7), 400, "host.hostname"),
    ("string-gpu-index", _set(["gpus", 0, "index"], "0"), 400, "gpus.0.index"),
    ("object-for-readings", _set(["readings"], {}), 400, "readings"),
    ("xid-code-string", _set(["readings", 0, "xid_events"], lambda now: [{"ts": iso(now), "code": "79"}]), 400,
     "readings.0.xid_events.0.code"),
    # out of range
    ("negative-percent", _set(["readings", 2, "fan_speed_pct"], -1), 400, "readings.2.fan_speed_pct"),
    ("percent-over-100", _set(["readings", 2, "utilization_gpu_pct"], 101), 400, "readings.2.utilization_gpu_pct"),
    ("memory-percent-over-100", _set(["readings", 0, "utilization_memory_pct"], 250), 400,
     "readings.0.utilization_memory_pct"),
    ("negative-power", _set(["readings", 0, "power_w"], -0.5), 400, "readings.0.power_w"),
    ("negative-energy", _set(["readings", 0, "energy_mj"], -1.0), 400, "readings.0.energy_mj"),
    ("negative-ecc", _set(["readings", 0, "ecc_corrected_volatile"], -3), 400, "readings.0.ecc_corrected_volatile"),
    ("huge-temperature", _set(["readings", 0, "temperature_c"], 40_000), 400, "readings.0.temperature_c"),
    ("pcie-gen-zero", _set(["readings", 0, "pcie_link_gen"], 0), 400, "readings.0.pcie_link_gen"),
    ("negative-gpu-index", _set(["gpus", 0, "index"], -1), 400, "gpus.0.index"),
    ("long-gpu-name", _set(["gpus", 0, "name"], "x" * 129), 400, "gpus.0.name"),
    # timestamps
    ("too-old", _set(["readings", 1, "ts"], lambda now: iso(now - dt.timedelta(days=7, minutes=1))), 400,
     "readings.1.ts"),
    ("future", _set(["readings", 2, "ts"], lambda now: iso(now + dt.timedelta(minutes=6))), 400, "readings.2.ts"),
    ("xid-too-old", _set(["readings", 0, "xid_events"], lambda now: [{"ts": iso(now - dt.timedelta(days=8)),
                                                                      "code": 79}]), 400,
     "readings.0.xid_events.0.ts"),
    ("naive-ts", _set(["readings", 0, "ts"], lambda now: now.replace(tzinfo=None).isoformat()), 400, "readings.0.ts"),
    ("naive-sent_at", _set(["sent_at"], lambda now: now.replace(tzinfo=None).isoformat()), 400, "sent_at"),
    # instants that leave datetime's range when moved to UTC: bad input, not a 500
    ("sent_at-before-year-1-in-utc", _set(["sent_at"], "0001-01-01T00:00:00.0+01:00"), 400, "sent_at"),
    ("sent_at-after-year-9999-in-utc", _set(["sent_at"], "9999-12-31T23:00:00-05:00"), 400, "sent_at"),
    ("ts-before-year-1-in-utc", _set(["readings", 0, "ts"], "0001-01-01T00:30:00+01:00"), 400, "readings.0.ts"),
    ("sent_at-year-1969", _set(["sent_at"], "1969-07-20T20:17:00Z"), 400, "sent_at"),
    ("date-only-ts", _set(["readings", 0, "ts"], lambda now: now.date().isoformat()), 400, "readings.0.ts"),
    ("epoch-ts", _set(["readings", 0, "ts"], lambda now: int(now.timestamp())), 400, "readings.0.ts"),
    # names and inventory
    ("bad-throttle-reason", _set(["readings", 1, "throttle_reasons"], ["sw_power_cap", "too_hot"]), 400,
     "readings.1.throttle_reasons.1"),
    ("duplicate-gpu-uuids", _set(["gpus"], [make_gpu(A, 0), make_gpu(A, 1)]), 400, "gpus"),
    ("unknown-gpu-no-inventory", _set(["gpus"], []), 400, "readings.0.gpu_uuid"),
    ("reading-for-gpu-not-listed", _set(["readings", 2, "gpu_uuid"], gpu_uuid(77)), 400, "readings.2.gpu_uuid"),
    ("bad-batch_id", _set(["batch_id"], "12345"), 400, "batch_id"),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "status", "loc"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_batch_is_rejected_naming_the_field_and_nothing_is_stored(agent, counts, mutate, status, loc):
    now = timezone.now()
    batch = make_batch(agent.hostname, gpus=[A, B], readings=3, now=now)
    mutate(batch, now)
    before = counts()

    response = agent.post(batch)

    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]
    locs = [item["loc"] for item in body["detail"]]
    assert loc in locs, body
    assert all(item["msg"] for item in body["detail"])
    assert counts() == before
    agent.host.refresh_from_db()
    assert (agent.host.driver_version, agent.host.agent_version) == ("", "")


def test_a_bad_reading_rejects_the_whole_batch(agent, counts):
    """All or nothing: 4,999 good readings and one bad one store nothing (no new GPU, no host info)."""
    batch = make_batch(agent.hostname, gpus=[A, B], readings=1000, step=dt.timedelta(milliseconds=50))
    batch["readings"][999]["sm_clock_mhz"] = -5
    response = agent.post(batch, compress=True)
    assert response.status_code == 400
    assert [d["loc"] for d in response.json()["detail"]] == ["readings.999.sm_clock_mhz"]
    assert counts() == {"batches": 0, "readings": 0, "xids": 0, "latest": 0, "gpus": 0, "records": 0}


@pytest.mark.parametrize("sent_at", ["0001-01-01T00:00:00.0+01:00", "9999-12-31T23:00:00-05:00"])
def test_a_batch_without_readings_and_sent_at_at_the_edge_of_time_is_400(agent, counts, sent_at):
    # with no readings, sent_at is the host's last contact, and moving this one to UTC would
    # overflow: a 400, not a 500
    batch = make_batch(agent.hostname, gpus=[A], readings=0, sent_at=sent_at)
    before = counts()
    response = agent.post(batch)
    assert response.status_code == 400, response.content
    assert [item["loc"] for item in response.json()["detail"]] == ["sent_at"]
    assert counts() == before


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_are_rejected(agent, counts, literal):
    batch = make_batch(agent.hostname, gpus=[A], readings=2)
    batch["readings"][1]["power_w"] = 123.5
    text = json.dumps(batch)
    assert text.count("123.5") == 1
    response = agent.post(body=text.replace("123.5", literal))
    assert response.status_code == 400, response.content
    assert "readings.1.power_w" in [d["loc"] for d in response.json()["detail"]]
    assert counts()["batches"] == 0


@pytest.mark.parametrize("count", [5001, 6000])
def test_more_than_5000_readings_are_rejected(agent, counts, settings, count):
    batch = make_batch(agent.hostname, gpus=[A, B], readings=count, step=dt.timedelta(milliseconds=20))
    raw = json.dumps(batch).encode()
    # Sent as is, such a batch is far over the 1 MiB body limit.
    response = agent.post(body=raw)
    assert response.status_code == 413
    assert counts()["batches"] == 0
    # Even where the body limit allows it, the readings limit holds and names the field.
    settings.INGEST_MAX_BODY_BYTES = 16 * 1024 * 1024
    response = agent.post(body=gzip.compress(raw), content_encoding="gzip")
    assert response.status_code == 400
    assert [d["loc"] for d in response.json()["detail"]] == ["readings"]
    assert counts()["batches"] == 0


def test_exactly_5000_readings_are_accepted(agent, settings):
    settings.INGEST_MAX_BODY_BYTES = 16 * 1024 * 1024
    batch = make_batch(agent.hostname, gpus=[A, B], readings=5000, step=dt.timedelta(milliseconds=20))
    response = agent.post(body=gzip.compress(json.dumps(batch).encode()), content_encoding="gzip")
    assert response.status_code == 202
    assert response.json() == {"accepted": 5000, "duplicate": False}


def test_another_hosts_gpu_is_403_and_nothing_stored(agent, other_agent, counts):
    assert other_agent.post(make_batch(other_agent.hostname, gpus=[B])).status_code == 202
    before = counts()
    response = agent.post(make_batch(agent.hostname, gpus=[A, B], readings=4))
    assert response.status_code == 403
    assert B in response.json()["error"]
    assert counts() == before


def test_revoked_token_is_401_and_nothing_stored(agent, counts):
    host_token_revoke(token=HostToken.objects.get(pk=agent.record.pk))
    response = agent.post(make_batch(agent.hostname, gpus=[A, B], readings=4))
    assert response.status_code == 401
    assert counts() == {"batches": 0, "readings": 0, "xids": 0, "latest": 0, "gpus": 0, "records": 0}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"])
def test_non_json_content_type_is_415(agent, counts, content_type):
    response = agent.post(make_batch(agent.hostname, gpus=[A]), content_type=content_type)
    assert response.status_code == 415
    assert "Content-Type" in response.json()["error"]
    assert counts()["batches"] == 0


def test_json_content_type_with_charset_is_accepted(agent):
    batch = make_batch(agent.hostname, gpus=[A])
    assert agent.post(batch, content_type="application/json; charset=utf-8").status_code == 202


@pytest.mark.parametrize("encoding", ["br", "deflate", "zstd", "gzip, br"])
def test_unsupported_content_encoding_is_415(agent, counts, encoding):
    response = agent.post(make_batch(agent.hostname, gpus=[A]), content_encoding=encoding)
    assert response.status_code == 415
    assert "Content-Encoding" in response.json()["error"]
    assert counts()["batches"] == 0


@pytest.mark.parametrize(
    "body",
    [b"not gzip at all", gzip.compress(b'{"batch_id": 1}')[:-6]],
    ids=["garbage", "truncated"],
)
def test_body_that_is_not_valid_gzip_is_400(agent, counts, body):
    response = agent.post(body=body, content_encoding="gzip")
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "body"
    assert counts()["batches"] == 0


@pytest.mark.parametrize("body", [b"", b"[]", b"null", b'"batch"', b"\xff\xfe{}"], ids=repr)
def test_body_that_is_not_a_batch_object_is_400(agent, counts, body):
    response = agent.post(body=body)
    assert response.status_code == 400
    assert response.json()["detail"]
    assert counts()["batches"] == 0


def test_inconsistent_inventory_is_stored_with_the_odd_values_unknown(agent, counts):
    """Values no GPU has (shutdown below slowdown, a zero power limit) are NVML's on some boards:
    refusing them would refuse every later batch of the host (the agent re-sends its inventory).
    The batch is stored, the values kept as unknown (see test_ingest_hostile.py)."""
    batch = make_batch(agent.hostname, gpus=[make_gpu(A, 0, temp_slowdown_c=95, temp_shutdown_c=90)], readings=2)
    assert agent.post(batch).status_code == 202
    batch = make_batch(agent.hostname, gpus=[make_gpu(A, 0, power_limit_default_w=0.0)], readings=2)
    assert agent.post(batch).status_code == 202
    assert counts() == {"batches": 2, "readings": 4, "xids": 0, "latest": 1, "gpus": 1, "records": 0}


def test_inconsistent_inventory_update_keeps_the_rest_of_the_batch(agent, counts):
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=1)).status_code == 202
    batch = make_batch(agent.hostname, gpus=[make_gpu(A, 0, temp_shutdown_c=50)], readings=3)
    batch["host"]["driver_version"] = "590.10"
    assert agent.post(batch).status_code == 202
    assert counts()["readings"] == 4 and counts()["records"] == 1  # the driver update
    agent.host.refresh_from_db()
    assert agent.host.driver_version == "590.10"


def test_reading_and_inventory_for_other_gpu_in_one_batch(agent, counts):
    """Control for the cases above: the same batch shape, valid, is stored."""
    now = timezone.now()
    batch = make_batch(agent.hostname, gpus=[A, B], readings=3, now=now)
    batch["readings"].append(make_reading(B, now))
    assert agent.post(batch).status_code == 202
    assert counts()["readings"] == 4
