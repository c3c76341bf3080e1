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
    assert {"name", "unit", "label", "group", "live"} == set(served[0])
    json.dumps(served)  # plain JSON
