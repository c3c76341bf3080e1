"""The write's fast paths give what the general ones give: a GPU's series taken as columns (when
they share their times) against sample by sample; readings built as ingest's Reading structs
against msgspec's own checking of the same values; the request's usual series decoded together
against the field-by-field reader."""

import datetime as dt
import math
import struct

import msgspec
import pytest
from django.utils import timezone

from portal.remote_write import mapping, wire
from portal.remote_write.models import SourceGpu
from portal.remote_write.services import hand_on, writes
from portal.telemetry.ingest_fast import Reading, batch_of_readings
from tests.remote_write.helpers import FULL, UUID_A, UUID_B, labels, now_ms

STALE = struct.unpack("<d", (0x7FF0000000000002).to_bytes(8, "little"))[0]


def _decoded(series: list) -> list[wire.Series]:
    return wire.write_request_decode(wire.write_request_encode(series))


def _both_ways(series: list):
    """(_usable_samples' answer, the same samples grouped sample by sample), with their counts."""
    now = timezone.now()
    decoded = _decoded(series)
    fast_result, slow_result = writes.WriteResult(), writes.WriteResult()
    fast, identities = writes._usable_samples(decoded, now, fast_result)
    oldest = int((now - dt.timedelta(hours=48) - writes.EPOCH).total_seconds() * 1000)  # INGEST_MAX_AGE_HOURS
    newest = int((now + writes.MAX_FUTURE - writes.EPOCH).total_seconds() * 1000)
    by_gpu: dict[str, list] = {}
    for one in decoded:
        identity = mapping.identity_of(one.labels)
        if not isinstance(identity, str):
            by_gpu.setdefault(identity.uuid, []).append((identity, one))
    slow = {uuid: writes._gpu_samples(gpu_series, oldest, newest, slow_result) for uuid, gpu_series in by_gpu.items()}
    return (fast, fast_result.skipped), (slow, slow_result.skipped)


@pytest.fixture(autouse=True)
def _window(settings):
    settings.INGEST_MAX_AGE_HOURS = 48


@pytest.mark.parametrize(
    "case",
    [
        "usual",  # every series of a GPU at the same times: columns
        "duplicate time",  # a sample sent twice in one series: the later one
        "two series, one field",  # the throttle reasons from both names: the later series
        "jobs on one series",  # the first series with job labels gives the reading's jobs
        "other times",  # a series at other times: sample by sample
        "stale marker",  # ignored, sample by sample
        "value out of range",  # skipped and counted
        "outside the window",  # skipped and counted
    ],
)
def test_columns_give_what_sample_by_sample_gives(case):
    ts = [now_ms(-60 + 10 * step) for step in range(3)]
    series = [(labels(name), [(t, value + step) for step, t in enumerate(ts)]) for name, value in FULL.items()]
    series += [(labels(name, uuid=UUID_B, gpu="1"), [(t, value) for t in ts]) for name, value in FULL.items()]
    if case == "duplicate time":
        series[0] = (series[0][0], [*series[0][1], (ts[1], 99.0)])
        series[1:] = [(name, [*samples, (ts[1], samples[1][1])]) for name, samples in series[1:]]
    elif case == "two series, one field":
        series.append((labels("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), [(t, 64.0) for t in ts]))
    elif case == "jobs on one series":
        series[3] = (labels("DCGM_FI_DEV_GPU_UTIL", hpc_job="42"), series[3][1])
        series[5] = (labels("DCGM_FI_DEV_FB_USED", hpc_job="43"), series[5][1])
    elif case == "other times":
        series[2] = (series[2][0], series[2][1][:2])
    elif case == "stale marker":
        series[4] = (series[4][0], [(ts[0], STALE), *series[4][1][1:]])
    elif case == "value out of range":
        series[8] = (labels("DCGM_FI_DEV_FAN_SPEED"), [(ts[0], 250.0), *series[8][1][1:]])
    elif case == "outside the window":
        series[1] = (series[1][0], [(now_ms(-3 * 86400), 300.0), *series[1][1]])
    (fast, fast_skipped), (slow, slow_skipped) = _both_ways(series)
    assert fast == slow and fast_skipped == slow_skipped
    assert list(fast[UUID_A][ts[0]][0]) == list(slow[UUID_A][ts[0]][0])  # the fields in the same order
    if case == "usual":
        assert fast_skipped == 0 and fast[UUID_A][ts[2]][0]["temperature_c"] == FULL["DCGM_FI_DEV_GPU_TEMP"] + 2
    if case == "jobs on one series":
        assert fast[UUID_A][ts[0]][1] == '["slurm:42"]'


def test_a_value_not_known_yet_is_checked_then_kept():
    mapping._usable.clear()
    ts = now_ms(-60)
    (fast, _), (slow, _) = _both_ways([(labels("DCGM_FI_DEV_GPU_TEMP"), [(ts, 61.0), (ts + 1000, 62.0)])])
    assert fast == slow
    assert mapping.usable_kept("temperature_c") == {61.0: 61.0, 62.0: 62.0}
    assert mapping.value_usable("fan_speed_pct", 250.0) is None and 250.0 in mapping.usable_kept("fan_speed_pct")


def _pending(values: dict, ts: dt.datetime, jobs: str | None = None) -> hand_on.Pending:
    return hand_on.Pending(ts, values, jobs, ts)


@pytest.mark.parametrize(
    "values",
    [
        {**{mapping.SERIES_FIELDS[name]: float(value) for name, value in FULL.items()}},
        {"temperature_c": 0.0, "power_w": 0.0, "throttle_reasons": 0.0, "remapped_rows_failure": 1.0},
        {"temperature_c": 200.0, "fan_speed_pct": 100.0, "throttle_reasons": float((1 << 31) - 1)},
        {"utilization_gpu_pct": 99.6, "memory_used_mib": 1e7, "energy_mj": 1.5e15, "xid_raw": 79.0},
        {},
    ],
)
def test_readings_built_as_structs_pass_ingests_own_checks(values):
    """Each value the write keeps (mapping.value_usable) becomes a Reading that msgspec, given the
    same reading as JSON, accepts and reads back equal."""
    assert all(mapping.value_usable(name, value) is not None for name, value in values.items())
    gpu = SourceGpu(uuid=UUID_A, xid_last=0.0, remapped_last=0.0)
    ts = timezone.now().replace(microsecond=123000)
    reading = hand_on._reading(gpu, _pending(values, ts, '["slurm:7", "k8s:ml/train-0"]'))
    assert isinstance(reading, Reading)
    assert msgspec.json.decode(msgspec.json.encode(reading), type=Reading) == reading
    if values.get("xid_raw"):  # a change from the baseline (0) to another code: an event
        assert [(event.ts, event.code) for event in reading.xid_events] == [(ts, int(values["xid_raw"]))]
    if "remapped_raw" in values:
        assert reading.remapped_rows_pending is True and gpu.remapped_last == values["remapped_raw"]


def test_a_batch_of_readings_checks_its_host_and_its_size():
    from pydantic import ValidationError

    from portal.telemetry.schemas import MAX_READINGS_PER_BATCH

    gpu = SourceGpu(uuid=UUID_A)
    ts = timezone.now()
    one = hand_on._reading(gpu, _pending({"temperature_c": 60.0}, ts))
    values = {"batch_id": __import__("uuid").uuid4(), "sent_at": ts, "gpus": [{"uuid": UUID_A, "index": 0}]}
    batch = batch_of_readings(host={"hostname": "prom-node-1", "driver_version": None}, readings=[one], **values)
    assert batch.readings == [one] and batch.host.hostname == "prom-node-1" and batch.gpus[0].index == 0
    with pytest.raises(ValidationError, match="hostname"):
        batch_of_readings(host={"hostname": "not a hostname", "driver_version": None}, readings=[one], **values)
    with pytest.raises(ValidationError, match="readings"):
        batch_of_readings(host={"hostname": "prom-node-1"}, readings=[one] * (MAX_READINGS_PER_BATCH + 1), **values)


@pytest.mark.parametrize("label_bytes", [10, 120, 200, 20_000])  # series of 1, 2 and 3 length bytes
def test_usual_and_other_series_in_one_request_decode_as_the_general_reader_does(label_bytes):
    ts = 1_700_000_000_000
    usual = ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "UUID": "GPU-1", "x": "v" * label_bytes}, [(ts, 61.0), (ts + 1, 0.0)])
    long_labels = ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "UUID": "GPU-2", "y": "w" * 300}, [(ts, 1.5)])
    no_samples = ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "UUID": "GPU-3"}, [])
    other_time = ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "UUID": "GPU-4"}, [(5, 2.5), (-1, math.inf)])
    request = [usual, long_labels, usual, no_samples, other_time, usual]
    decoded = _decoded(request)
    body = wire.write_request_encode(request)
    general = []
    position = 0
    while position < len(body):
        _, position = wire._varint(body, position, len(body))
        inner, position = wire._length(body, position, len(body))
        general.append(wire.Series(*wire._series(body, inner, position)))
    assert decoded == general
    assert [one.samples for one in decoded] == [samples for _, samples in request]
    assert wire.labels_decode(decoded[1].labels)["y"] == "w" * 300
