"""The metric registry (portal/telemetry/metrics.py) against the wire contract and what it builds.

The JSON schemas pinned in tests/telemetry/pinned/ are the ingest schemas as they were written by
hand before the registry: the ones built from it must stay the same, field for field, bound for bound.
"""

import json
from pathlib import Path

import msgspec

from portal.telemetry import metrics
from portal.telemetry.columns import READING_METRICS
from portal.telemetry.ingest_fast import Reading
from portal.telemetry.schemas import BatchIn, ReadingIn

PINNED = Path(__file__).parent / "pinned"


def _pinned(name: str) -> dict:
    return json.loads((PINNED / name).read_text())


def test_the_pydantic_schema_is_the_contract_as_pinned():
    assert json.loads(json.dumps(BatchIn.model_json_schema())) == _pinned("batch_in.json")


def test_the_msgspec_schema_is_the_fast_reading_as_pinned():
    # A job key's pattern is not in the msgspec schema: the fast path checks it once per distinct
    # list of keys after decoding (ingest_fast._jobs_ok), the same pattern as the contract's.
    assert json.loads(json.dumps(msgspec.json.schema(Reading))) == _pinned("reading_fast.json")


def test_the_registry_names_the_readings_fields_in_table_order():
    assert tuple(m.name for m in metrics.METRICS) == READING_METRICS
    wire = [name for name in ReadingIn.model_fields if name not in ("gpu_uuid", "ts", "xid_events", "jobs")]
    assert tuple(wire) == READING_METRICS


def test_the_registry_bounds_are_the_schemas_bounds():
    properties = BatchIn.model_json_schema()["$defs"]["ReadingIn"]["properties"]
    for metric in metrics.METRICS:
        (shape, null) = properties[metric.name]["anyOf"]
        assert null == {"type": "null"}, metric.name
        assert properties[metric.name].get("default", "required") == "required"
        kind = {"int": "integer", "float": "number", "bool": "boolean", "reasons": "array"}[metric.type]
        assert shape["type"] == kind, metric.name
        assert shape.get("minimum") == metric.ge, metric.name
        assert shape.get("maximum") == metric.le, metric.name
        assert shape.get("maxItems") == metric.max_items, metric.name


def test_every_metric_is_fully_described():
    for metric in metrics.METRICS:
        assert metric.type in (metrics.INT, metrics.FLOAT, metrics.BOOL, metrics.REASONS)
        codecs = (metrics.SMALL, metrics.INTEGER, metrics.REAL, metrics.DOUBLE, metrics.COUNTER, metrics.FLAG)
        assert metric.codec in codecs
        assert metric.rollup in (None, metrics.MIN_MAX_MEAN, metrics.MAX)
        assert metric.label and metric.nullable
        assert (metric.max_items is not None) == (metric.type == metrics.REASONS)


def test_the_json_the_pages_read_names_each_metric_once():
    served = metrics.as_json()
    assert [entry["name"] for entry in served] == list(READING_METRICS)
    assert {"name", "unit", "type", "label", "group", "live", "rollup"} == set(served[0])
    json.dumps(served)  # plain JSON


def test_the_stored_columns_encodings_and_rollups_are_built_from_it():
    from portal.telemetry.models import ROLLUP_METRICS
    from portal.telemetry.services import compression

    # As they were written by hand before the registry (the chunk format and the rollup tables).
    assert ROLLUP_METRICS == (
        "temperature_c", "fan_speed_pct", "power_w", "utilization_gpu_pct", "utilization_memory_pct",
        "memory_used_mib", "sm_clock_mhz", "mem_clock_mhz",
    )  # fmt: skip
    small, integer, real = (
        compression.KINDS["temperature_c"],
        compression.KINDS["memory_used_mib"],
        compression.KINDS["power_w"],
    )
    assert compression.KINDS["fan_speed_pct"] is small and compression.KINDS["throttle_reasons"] is small
    assert compression.KINDS["sm_clock_mhz"] is integer and compression.KINDS["power_limit_w"] is real
    assert compression.KINDS["energy_mj"].transform == "xor"
    assert compression.KINDS["pcie_replay_count"] is compression.COUNTER
    assert compression.KINDS["retired_pages_pending"].to_python is bool
    assert compression.KINDS["job_set"] is compression.INT
    assert list(compression.KINDS)[1 : 1 + len(READING_METRICS)] == list(READING_METRICS)


def test_the_newest_reading_and_the_live_point_carry_the_registrys_metrics():
    from portal.live.selectors import POINT_FIELDS
    from portal.telemetry.models import GpuLatest

    latest = metrics.names(latest=True)
    assert latest == (
        "temperature_c", "fan_speed_pct", "power_w", "power_limit_w", "utilization_gpu_pct", "memory_used_mib",
        "throttle_reasons",
    )  # fmt: skip
    stored = {field.name for field in GpuLatest._meta.get_fields()}
    assert set(latest) <= stored
    assert POINT_FIELDS[:2] == ("gpu_id", "ts")
    assert set(POINT_FIELDS[2:]) == set(metrics.names(live=True))


def test_remote_writes_series_are_the_registrys():
    from portal.remote_write import mapping

    # prometheus-v1.md's table, as it was written by hand before the registry.
    assert mapping.SERIES_FIELDS == {
        "DCGM_FI_DEV_GPU_TEMP": "temperature_c", "DCGM_FI_DEV_POWER_USAGE": "power_w",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj", "DCGM_FI_DEV_GPU_UTIL": "utilization_gpu_pct",
        "DCGM_FI_DEV_MEM_COPY_UTIL": "utilization_memory_pct", "DCGM_FI_DEV_FB_USED": "memory_used_mib",
        "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
        "DCGM_FI_DEV_FAN_SPEED": "fan_speed_pct", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay_count",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_corrected_volatile",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_uncorrected_volatile",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remapped_rows_failure",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": mapping.REMAPPED_RAW,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle_reasons",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "throttle_reasons", "DCGM_FI_DEV_XID_ERRORS": mapping.XID_RAW,
    }  # fmt: skip
    assert ({"power_w", "energy_mj"}, {"remapped_rows_failure"}) == (mapping.FLOAT_FIELDS, mapping.BOOL_FIELDS)
    assert {"throttle_reasons"} == mapping.MASK_FIELDS


def test_every_chart_group_has_its_box_on_the_gpu_page():
    # static/live/gpu.js draws one chart per group, in the page's chart-<group> box.
    page = (Path(__file__).parents[2] / "templates" / "live" / "_gpu_charts.html").read_text()
    groups = {metric.group for metric in metrics.BUILT_IN if metric.group}
    assert groups == {"temperature", "fan", "power", "utilization", "memory", "clocks"}
    assert [group for group in sorted(groups) if f'id="chart-{group}"' not in page] == []
