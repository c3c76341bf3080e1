"""The fast path (portal.telemetry.ingest_fast) against the contract (schemas.BatchIn), input by input.

For every body: where BatchIn refuses, the fast path hands over (so the protocol's 400 is
BatchIn's, exactly); where the fast path answers, BatchIn gives the same batch, value for value
and type for type. The bodies are valid batches with one thing changed: a value of every JSON
type and edge in every reading field, timestamps in every form RFC 3339 and its parsers argue
about, and raw bytes a JSON parser may or may not take.
"""

import datetime as dt
import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from portal.telemetry import ingest_fast, ingest_view
from portal.telemetry.models import GpuLatest, Reading
from portal.telemetry.schemas import BatchIn
from tests.telemetry.batches import gpu_uuid, make_batch, make_gpu, make_reading

FIXTURES = Path(__file__).resolve().parents[1] / "agents" / "fixtures"
NOW = dt.datetime(2026, 12, 2, 10, 0, 5, tzinfo=dt.UTC)
UUID = gpu_uuid(1)

VALUES = [
    None, True, False, 0, 1, -1, 5, 64, 100, 101, 1023, 1024, 10_000, 10_001, 100_000, 100_001, 2**31 - 1, 2**31,
    2**62, 2**62 + 1, 2**63, 2**64 + 5, 0.0, -0.0, 0.5, 64.0, 412.25, 10_000.0, 10_000.5, 1e308, -1e-300, "",
    "64", "sw_power_cap", [], [None], ["sw_power_cap"], ["bogus"], ["sw_power_cap"] * 16, ["gpu_idle"] * 17,
    {}, {"ts": "2026-12-02T10:00:03.512Z", "code": 79},
]  # fmt: skip
TIMES = [
    "2026-12-02T10:00:05Z", "2026-12-02T10:00:05.123Z", "2026-12-02T10:00:05.123456Z",
    "2026-12-02T10:00:05.1234567Z", "2026-12-02T10:00:05.999999999Z", "2026-12-02T10:00:05,1234567Z",
    "2026-12-02T10:00:05,123Z", "2026-12-02T10:00:05+00:00", "2026-12-02T10:00:05-00:00",
    "2026-12-02T10:00:05+02:00", "2026-12-02T10:00:05+23:59", "2026-12-02T10:00:05+16:00", "2026-12-02T10:00:05z",
    "2026-12-02t10:00:05Z", "2026-12-02 10:00:05Z", "2026-12-02T10:00:05", "2026-12-02T10:00Z", "2026-12-02",
    "2026-12-02T24:00:00Z", "2026-12-02T23:59:60Z", "2026-02-30T10:00:05Z", "1969-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z", "9000-12-31T23:59:59Z", "9001-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
    "+2026-12-02T10:00:05Z", "2026-12-02T10:00:05.Z", "20261202T100005Z", "2026-W49-3T10:00:05Z",
    " 2026-12-02T10:00:05Z", "2026-12-02T10:00:05Z ", "2026-12-02T10:00:05+0000", "2026-12-02T10:00:05+00",
    "1764669605", 1764669605, 1764669605.5, None,
]  # fmt: skip
GPU_UUIDS = [UUID, UUID + "\n", UUID + " ", "GPU-", "GPU-a", "MIG-a", "gpu-abc", "GPU-a/b", "GPU-" + "a" * 92,
             "GPU-" + "a" * 93, "GPU-\u0661\u0662\u0663", "GPU-abc\u0000", 7, None]  # fmt: skip
RAW = [
    b"", b"null", b"[]", b"{}", b'"x"', b"\xef\xbb\xbf{BODY}", b"{BODY} ", b" \n{BODY}\n", b"{BODY}x", b"{BODY}{}",
    b'{"batch_id": "00000000-0000-0000-0000-000000000000", BODY}', b'{BODY, "readings": []}', b'{BODY, "x": NaN}',
    b'{BODY, "x": Infinity}', b'{BODY, "x": "\\ud800"}', b'{BODY, "x": "\xff"}', b'{BODY, "x": "\xc3\xa9"}',
    b'{BODY, "x": "\\u00e9"}', b'{BODY, "x": "\xed\xa0\x80"}', b'{BODY, "x": 1e400}', b'{BODY, "x": [}',
    b'{BODY, "x": 01}', b'{BODY, "x": "\x01"}', b'{BODY, "gpus": null}', b'{BODY, "gpus": {}}',
    b'{BODY, "sent_at": null}', b'{BODY, "host": []}',
]  # fmt: skip
BATCH_IDS = [
    "5f0c7a52-8a3e-4a9f-9a57-3f5d3c1e2b10", "5f0c7a528a3e4a9f9a573f5d3c1e2b10", "5F0C7A52-8A3E-4A9F-9A57-3F5D3C1E2B10",
    "{5f0c7a52-8a3e-4a9f-9a57-3f5d3c1e2b10}", "urn:uuid:5f0c7a52-8a3e-4a9f-9a57-3f5d3c1e2b10",
    "5f0c7a52-8a3e-4a9f-9a57-3f5d3c1e2b1", "5f0c7a52-8a3e-4a9f-9a57-3f5d3c1e2b10x", "", 5, None,
]  # fmt: skip


def _batch(readings=None, **overrides) -> dict:
    batch = make_batch("dgx-07", gpus=[UUID], readings=2, now=NOW, inventory=False)
    if readings is not None:
        batch["readings"] = readings
    batch.update(overrides)
    return batch


def _reading(uuid: str = UUID, **fields) -> dict:
    reading = make_reading(uuid, NOW)
    reading.update(fields)
    return reading


def _body(batch: dict, ensure_ascii: bool = True) -> bytes:
    return json.dumps(batch, separators=(",", ":"), ensure_ascii=ensure_ascii).encode()


def _plain(value):
    """A batch, or a part of it, as nested built-in values with their types (float 1.0 is not 1)."""
    if isinstance(value, msgspec.Struct):
        value = msgspec.structs.asdict(value)
    elif hasattr(value, "model_dump"):
        value = {name: getattr(value, name) for name in type(value).model_fields}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dt.datetime):
        return ("datetime", value.isoformat(), value.tzinfo is dt.UTC)
    return (type(value).__name__, value)


def _errors(error: ValidationError) -> list:
    # The context holds the exception objects themselves (equal only to themselves).
    return error.errors(include_context=False) + [ingest_view._validation_detail(error)]


def _agree(body: bytes) -> str:
    """'fast' when the fast path took the body (and BatchIn gives the same), 'handed over' otherwise."""
    fast = ingest_fast._fast(body)
    try:
        contract = BatchIn.model_validate_json(body)
    except ValidationError as error:
        assert fast is None, f"the fast path accepted what BatchIn refuses: {body[:300]!r}"
        with pytest.raises(ValidationError) as handed_over:
            ingest_fast.batch_parse(body)
        assert _errors(handed_over.value) == _errors(error)
        return "refused"
    if fast is None:
        assert _plain(ingest_fast.batch_parse(body)) == _plain(contract)
        return "handed over"
    assert _plain(fast) == _plain(contract), body[:300]
    return "fast"


def test_a_valid_batch_takes_the_fast_path_with_the_same_values():
    batch = _batch()
    batch["readings"][0]["xid_events"] = [{"ts": "2026-12-02T10:00:03.512Z", "code": 79}]
    batch["readings"][1]["throttle_reasons"] = ["hw_thermal", "sw_power_cap", "hw_thermal"]
    batch["readings"][1]["power_w"] = 412  # an integer where a float belongs: a float, as BatchIn makes it
    batch["host"]["dropped_batches"] = 3
    assert _agree(_body(batch)) == "fast"
    with_inventory = _batch(gpus=[make_gpu(UUID, name=" "), make_gpu(gpu_uuid(2), index=1, serial=None)])
    assert _agree(_body(with_inventory)) == "fast"
    assert isinstance(ingest_fast.batch_parse(_body(batch)).readings[0], ingest_fast.Reading)


@pytest.mark.parametrize("field", [name for name in make_reading(UUID, NOW) if name not in ("ts", "gpu_uuid")])
def test_every_value_in_every_reading_field(field):
    outcomes = set()
    for value in VALUES:
        reading = _reading(**{field: value})
        outcomes.add(_agree(_body(_batch([reading, make_reading(UUID, NOW)]))))
    assert {"fast", "refused"} <= outcomes
    missing = make_reading(UUID, NOW)
    del missing[field]
    _agree(_body(_batch([missing])))


@pytest.mark.parametrize("moment", TIMES)
def test_timestamps(moment):
    _agree(_body(_batch([_reading(ts=moment)])))
    _agree(_body(_batch([_reading(ts=moment, power_w=41.1234567)])))
    _agree(_body(_batch(sent_at=moment)))
    _agree(_body(_batch([_reading(xid_events=[{"ts": moment, "code": 1}])])))


def test_timestamps_outside_utc_or_the_years_are_handed_to_batchin():
    for moment in ("2026-12-02T10:00:05+02:00", "1969-12-31T23:59:59Z", "9001-01-01T00:00:00Z"):
        assert _agree(_body(_batch([_reading(ts=moment)]))) in ("handed over", "refused")


@pytest.mark.parametrize("uuid", GPU_UUIDS)
def test_gpu_uuids(uuid):
    _agree(_body(_batch([_reading(uuid)])))
    _agree(_body(_batch([_reading(uuid)]), ensure_ascii=False))


@pytest.mark.parametrize("batch_id", BATCH_IDS)
def test_batch_ids(batch_id):
    _agree(_body(_batch(batch_id=batch_id)))


@pytest.mark.parametrize("raw", RAW)
def test_raw_bodies(raw):
    body = _body(_batch())[1:-1]
    _agree(raw.replace(b"BODY", body))


JOBS = [
    None, [], ["slurm:4242"], ["slurm:1", "user:alice", "k8s:vision/trainer-0", "k8s:uid/1c2d3e4f-0000"],
    ["slurm:1"] * 16, ["slurm:1"] * 17, [""], ["slurm:"], ["alice"], ["user:al ice"], ["user:al\tice"],
    ["user:" + "a" * 123], ["user:" + "a" * 124], ["user:ali\u00e9"], ["user:a\u0000"], ["slurm:1\n"],
    [4242], [None], "slurm:1", {"slurm": 1},
]  # fmt: skip


@pytest.mark.parametrize("jobs", JOBS)
def test_jobs(jobs):
    _agree(_body(_batch([_reading(jobs=jobs)])))
    _agree(_body(_batch([_reading(jobs=jobs)]), ensure_ascii=False))


def test_jobs_outcomes():
    outcomes = {repr(jobs): _agree(_body(_batch([_reading(jobs=jobs)]))) for jobs in JOBS}
    assert outcomes[repr(["slurm:1", "user:alice", "k8s:vision/trainer-0", "k8s:uid/1c2d3e4f-0000"])] == "fast"
    assert outcomes[repr(["slurm:1"] * 16)] == "fast" and outcomes[repr(["user:" + "a" * 123])] == "fast"
    for refused in (["slurm:1"] * 17, ["alice"], ["user:al ice"], ["user:" + "a" * 124], [""], [4242], "slurm:1"):
        assert outcomes[repr(refused)] == "refused", refused


def test_limits():
    many = [_reading()] * 5000
    assert _agree(_body(_batch(many))) == "fast"
    assert _agree(_body(_batch([*many, many[0]]))) == "refused"
    xids = [{"ts": "2026-12-02T10:00:03Z", "code": 1}]
    _agree(_body(_batch([_reading(xid_events=xids * 1000)])))
    _agree(_body(_batch([_reading(xid_events=xids * 1001)])))
    _agree(_body(_batch([_reading(xid_events=[{"ts": "2026-12-02T10:00:03Z", "code": 10**6 + 1}])])))
    for host in ({"hostname": "dgx-07\n"}, {"hostname": "dgx-07", "agent_version": "a\u0000"}, {"hostname": ""}):
        _agree(_body(_batch(host=host)))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(sorted(make_reading(UUID, NOW))), value=JSON_VALUES)
def test_any_json_value_in_a_reading_field(field, value):
    _agree(_body(_batch([_reading(**{field: value})])))


@pytest.mark.django_db
def test_the_view_stores_what_either_path_accepts(agent):
    """A batch of the fast path, and one handed to BatchIn (a zone other than UTC): both stored,
    in UTC, the throttle reasons as their mask."""
    fast = make_batch(agent.hostname, readings=2)
    fast["readings"][0]["throttle_reasons"] = ["sw_power_cap", "hw_thermal"]
    assert agent.post(fast).status_code == 202
    late = timezone_now = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=1)
    zoned = make_batch(agent.hostname, readings=1, now=timezone_now, inventory=False)
    zoned["readings"][0]["ts"] = late.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat()
    assert agent.post(zoned).status_code == 202
    stored = list(Reading.objects.order_by("ts").values_list("ts", "throttle_reasons"))
    assert len(stored) == 3 and stored[0][0] == late
    assert sorted(mask for _, mask in stored) == [4, 4, 4 | 64]
    assert GpuLatest.objects.count() == 1
    assert ingest_view.fast_path


@pytest.mark.parametrize(
    "raw_reading",
    [
        b'"temperature_c":64,"temperature_c":300', b'"temperature_c":300,"temperature_c":64',
        b'"energy_mj":1e400', b'"energy_mj":-1e400', b'"energy_mj":100000000000000000000000',
        b'"energy_mj":1E5', b'"energy_mj":-0', b'"pcie_replay_count":1e2', b'"pcie_replay_count":100.0',
        b'"pcie_replay_count":18446744073709551616', b'"pcie_replay_count":-9223372036854775809',
        b'"power_w":1.00000000000000000000001', b'"power_w":0.1e-400',
    ],
)  # fmt: skip
def test_numbers_and_repeated_keys_as_written(raw_reading):
    """Bytes json.dumps never writes: a key twice in a reading, numbers past float or int64."""
    body = _body(_batch([_reading()]))
    reading_start = body.index(b'"gpu_uuid"')
    _agree(body[:reading_start] + raw_reading + b"," + body[reading_start:])


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("real_gpu_*.json")), ids=lambda path: path.stem)
def test_batches_of_real_gpus_take_the_fast_path(fixture):
    """What NVML really reported on an H200, as the agent sends it: fast, or the speed is gone unnoticed."""
    assert _agree(_body(json.loads(fixture.read_text()))) == "fast"
