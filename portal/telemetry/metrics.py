"""The reading metrics, described once: what ingest accepts, how it stores, rolls up and shows them.

Each `Metric` is one field of an ingest-v1 reading (shared/protocol/ingest-v1.md), in the readings
table's order. From this list are built: the two ingest schemas (`schemas.ReadingIn` with pydantic,
`ingest_fast.Reading` with msgspec), the stored row's column order (`columns.READING_METRICS`), the
compressed chunks' encodings (`services/compression.KINDS`), the rolled-up metrics
(`models.ROLLUP_METRICS`) and the live page's points (`live.selectors.POINT_COLUMNS`); the pages read
it as JSON (`as_json`, served once in the chart templates) and the OpenAPI document through the
schemas. Adding a metric is one entry here, its table column (a migration) and its tests:
docs/architecture.md, "How to add a metric".

No Django here (columns.py and the wear meters' arithmetic read it without settings): labels are
marked for translation with `gettext_noop` and translated where they are shown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.utils.translation import gettext_noop as _noop

# The wire types: a JSON integer, number or boolean, or the list of throttle reason names
# (`models.THROTTLE_REASONS`, stored as a bit mask).
INT, FLOAT, BOOL, REASONS = "int", "float", "bool", "reasons"
# Compression codecs (services/compression.py): a small integer, a 32-bit integer, a real, a double
# (XOR-coded bits), a 64-bit counter, a boolean.
SMALL, INTEGER, REAL, DOUBLE, COUNTER, FLAG = "small", "integer", "real", "double", "counter", "flag"
# Rollup aggregations: min / max / mean per bucket (with known counts), or the maximum only.
MIN_MAX_MEAN, MAX = "min_max_mean", "max"


@dataclass(frozen=True, slots=True)
class Metric:
    """One reading metric. `ge`/`le`: the protocol's bounds (`le` None: unbounded above, finite);
    `nullable`: null means "not supported by this GPU"; `codec`: its compression; `rollup`: how a
    bucket aggregates it (None: not rolled up); `label`: shown to people (translated where shown);
    `group`: the chart it is drawn in on the live page (None: not charted); `live`: sent in the live
    page's points; `latest`: kept in each GPU's newest reading (GpuLatest)."""

    name: str
    unit: str
    type: str
    ge: int | float | None
    le: int | float | None
    codec: str
    label: str
    nullable: bool = True
    rollup: str | None = None
    group: str | None = None
    live: bool = False
    latest: bool = False
    max_items: int | None = None  # REASONS: the most names a reading may list


def _m(name, unit, type_, ge, le, codec, label, **extra) -> Metric:
    return Metric(name=name, unit=unit, type=type_, ge=ge, le=le, codec=codec, label=label, **extra)


_COUNT_MAX = 2**62
_MIB_MAX = 2**31 - 1

# In the readings table's order (never reorder: the chunk format and COPY follow it).
METRICS: tuple[Metric, ...] = (
    _m("temperature_c", "°C", INT, -60, 200, SMALL, _noop("Temperature"),
       rollup=MIN_MAX_MEAN, group="temperature", live=True, latest=True),
    _m("fan_speed_pct", "%", INT, 0, 100, SMALL, _noop("Fan"),
       rollup=MIN_MAX_MEAN, group="fan", live=True, latest=True),
    _m("power_w", "W", FLOAT, 0, 10_000, REAL, _noop("Power"),
       rollup=MIN_MAX_MEAN, group="power", live=True, latest=True),
    _m("power_limit_w", "W", FLOAT, 0, 10_000, REAL, _noop("Power limit"),
       group="power", live=True, latest=True),
    _m("energy_mj", "mJ", FLOAT, 0, None, DOUBLE, _noop("Energy"), rollup=MAX),
    _m("utilization_gpu_pct", "%", INT, 0, 100, SMALL, _noop("GPU utilisation"),
       rollup=MIN_MAX_MEAN, group="utilization", live=True, latest=True),
    _m("utilization_memory_pct", "%", INT, 0, 100, SMALL, _noop("Memory utilisation"),
       rollup=MIN_MAX_MEAN, group="utilization", live=True),
    _m("memory_used_mib", "MiB", INT, 0, _MIB_MAX, INTEGER, _noop("Memory used"),
       rollup=MIN_MAX_MEAN, group="memory", live=True, latest=True),
    _m("sm_clock_mhz", "MHz", INT, 0, 100_000, INTEGER, _noop("SM clock"),
       rollup=MIN_MAX_MEAN, group="clocks", live=True),
    _m("mem_clock_mhz", "MHz", INT, 0, 100_000, INTEGER, _noop("Memory clock"),
       rollup=MIN_MAX_MEAN, group="clocks", live=True),
    _m("pstate", "", INT, 0, 32, SMALL, _noop("Performance state")),
    _m("throttle_reasons", "", REASONS, None, None, SMALL, _noop("Clock event reasons"),
       group="temperature", live=True, latest=True, max_items=16),
    _m("ecc_corrected_volatile", "", INT, 0, _COUNT_MAX, COUNTER, _noop("ECC corrected (volatile)")),
    _m("ecc_uncorrected_volatile", "", INT, 0, _COUNT_MAX, COUNTER, _noop("ECC uncorrected (volatile)")),
    _m("ecc_uncorrected_aggregate", "", INT, 0, _COUNT_MAX, COUNTER, _noop("ECC uncorrected (aggregate)")),
    _m("retired_pages_pending", "", BOOL, None, None, FLAG, _noop("Retired pages pending")),
    _m("remapped_rows_pending", "", BOOL, None, None, FLAG, _noop("Remapped rows pending")),
    _m("remapped_rows_failure", "", BOOL, None, None, FLAG, _noop("Row remapping failed")),
    _m("pcie_link_gen", "", INT, 1, 10, SMALL, _noop("PCIe generation")),
    _m("pcie_link_width", "", INT, 1, 64, SMALL, _noop("PCIe width")),
    _m("pcie_replay_count", "", INT, 0, _COUNT_MAX, COUNTER, _noop("PCIe replays")),
)  # fmt: skip

BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}


def names(**where) -> tuple[str, ...]:
    """The metrics' names, in table order, whose attributes equal `where` (e.g. live=True)."""
    return tuple(m.name for m in METRICS if all(getattr(m, key) == value for key, value in where.items()))


def rolled_up() -> tuple[str, ...]:
    """The metrics rolled up as min / max / mean per bucket, in table order."""
    return names(rollup=MIN_MAX_MEAN)


def as_json() -> list[dict]:
    """The registry as the pages read it (json_script): name, unit, label, group, in table order."""
    return [
        {key: value for key, value in asdict(metric).items() if key in ("name", "unit", "label", "group", "live")}
        for metric in METRICS
    ]
