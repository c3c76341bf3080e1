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


def gettext_noop(message: str) -> str:
    """Marks a label for translation (makemessages finds it by this name); translated where it is
    shown. Django's own gettext_noop reads the settings, which this module must not need."""
    return message


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
    page's points; `latest`: kept in each GPU's newest reading (GpuLatest); `dcgm`: the series
    remote write stores as it."""

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
    # The dcgm-exporter series whose samples give it (prometheus-v1.md; portal/remote_write/mapping.py).
    dcgm: tuple[str, ...] = ()


def _m(name, unit, type_, ge, le, codec, label, **extra) -> Metric:
    return Metric(name=name, unit=unit, type=type_, ge=ge, le=le, codec=codec, label=label, **extra)


_COUNT_MAX = 2**62
_MIB_MAX = 2**31 - 1

# fmt: off
# Each built-in metric by a name of its own: code whose logic concerns one metric (a rule, a wear
# meter, a checklist's check, the RMA pack) says `metrics.TEMPERATURE.name`, never the field's name,
# so that renaming a field is this file (and its migration). tests/telemetry/test_metric_names.py keeps it so.
TEMPERATURE = _m("temperature_c", "°C", INT, -60, 200, SMALL, gettext_noop("Temperature"),
    rollup=MIN_MAX_MEAN, group="temperature", live=True, latest=True,
    dcgm=("DCGM_FI_DEV_GPU_TEMP",))
FAN = _m("fan_speed_pct", "%", INT, 0, 100, SMALL, gettext_noop("Fan"),
    rollup=MIN_MAX_MEAN, group="fan", live=True, latest=True,
    dcgm=("DCGM_FI_DEV_FAN_SPEED",))
POWER = _m("power_w", "W", FLOAT, 0, 10_000, REAL, gettext_noop("Power"),
    rollup=MIN_MAX_MEAN, group="power", live=True, latest=True,
    dcgm=("DCGM_FI_DEV_POWER_USAGE",))
POWER_LIMIT = _m("power_limit_w", "W", FLOAT, 0, 10_000, REAL, gettext_noop("Power limit"),
    group="power", live=True, latest=True)
ENERGY = _m("energy_mj", "mJ", FLOAT, 0, None, DOUBLE, gettext_noop("Energy"), rollup=MAX,
    dcgm=("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",))
UTILIZATION_GPU = _m("utilization_gpu_pct", "%", INT, 0, 100, SMALL, gettext_noop("GPU utilisation"),
    rollup=MIN_MAX_MEAN, group="utilization", live=True, latest=True,
    dcgm=("DCGM_FI_DEV_GPU_UTIL",))
UTILIZATION_MEMORY = _m("utilization_memory_pct", "%", INT, 0, 100, SMALL, gettext_noop("Memory utilisation"),
    rollup=MIN_MAX_MEAN, group="utilization", live=True,
    dcgm=("DCGM_FI_DEV_MEM_COPY_UTIL",))
MEMORY_USED = _m("memory_used_mib", "MiB", INT, 0, _MIB_MAX, INTEGER, gettext_noop("Memory used"),
    rollup=MIN_MAX_MEAN, group="memory", live=True, latest=True,
    dcgm=("DCGM_FI_DEV_FB_USED",))
SM_CLOCK = _m("sm_clock_mhz", "MHz", INT, 0, 100_000, INTEGER, gettext_noop("SM clock"),
    rollup=MIN_MAX_MEAN, group="clocks", live=True,
    dcgm=("DCGM_FI_DEV_SM_CLOCK",))
MEM_CLOCK = _m("mem_clock_mhz", "MHz", INT, 0, 100_000, INTEGER, gettext_noop("Memory clock"),
    rollup=MIN_MAX_MEAN, group="clocks", live=True,
    dcgm=("DCGM_FI_DEV_MEM_CLOCK",))
PSTATE = _m("pstate", "", INT, 0, 32, SMALL, gettext_noop("Performance state"))
THROTTLE_REASONS = _m("throttle_reasons", "", REASONS, None, None, SMALL, gettext_noop("Clock event reasons"),
    group="temperature", live=True, latest=True, max_items=16,
    dcgm=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"))
ECC_CORRECTED_VOLATILE = _m("ecc_corrected_volatile", "", INT, 0, _COUNT_MAX, COUNTER,
    gettext_noop("ECC corrected (volatile)"), dcgm=("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",))
ECC_UNCORRECTED_VOLATILE = _m("ecc_uncorrected_volatile", "", INT, 0, _COUNT_MAX, COUNTER,
    gettext_noop("ECC uncorrected (volatile)"), dcgm=("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",))
ECC_UNCORRECTED_AGGREGATE = _m("ecc_uncorrected_aggregate", "", INT, 0, _COUNT_MAX, COUNTER,
    gettext_noop("ECC uncorrected (aggregate)"))
RETIRED_PAGES_PENDING = _m("retired_pages_pending", "", BOOL, None, None, FLAG, gettext_noop("Retired pages pending"))
REMAPPED_ROWS_PENDING = _m("remapped_rows_pending", "", BOOL, None, None, FLAG, gettext_noop("Remapped rows pending"))
REMAPPED_ROWS_FAILURE = _m("remapped_rows_failure", "", BOOL, None, None, FLAG, gettext_noop("Row remapping failed"),
    dcgm=("DCGM_FI_DEV_ROW_REMAP_FAILURE",))
PCIE_LINK_GEN = _m("pcie_link_gen", "", INT, 1, 10, SMALL, gettext_noop("PCIe generation"))
PCIE_LINK_WIDTH = _m("pcie_link_width", "", INT, 1, 64, SMALL, gettext_noop("PCIe width"))
PCIE_REPLAY_COUNT = _m("pcie_replay_count", "", INT, 0, _COUNT_MAX, COUNTER, gettext_noop("PCIe replays"),
    dcgm=("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",))
# fmt: on

# In the readings table's order (never reorder: the chunk format and COPY follow it).
BUILT_IN: tuple[Metric, ...] = (
    TEMPERATURE,
    FAN,
    POWER,
    POWER_LIMIT,
    ENERGY,
    UTILIZATION_GPU,
    UTILIZATION_MEMORY,
    MEMORY_USED,
    SM_CLOCK,
    MEM_CLOCK,
    PSTATE,
    THROTTLE_REASONS,
    ECC_CORRECTED_VOLATILE,
    ECC_UNCORRECTED_VOLATILE,
    ECC_UNCORRECTED_AGGREGATE,
    RETIRED_PAGES_PENDING,
    REMAPPED_ROWS_PENDING,
    REMAPPED_ROWS_FAILURE,
    PCIE_LINK_GEN,
    PCIE_LINK_WIDTH,
    PCIE_REPLAY_COUNT,
)


def _extra() -> tuple[Metric, ...]:
    """Metrics added by the settings, after the built-in ones: TELEMETRY_EXTRA_METRICS, a list of
    Metric fields (tests/settings.py takes it from PORTAL_EXTRA_METRICS, JSON). For the test that
    adds a throwaway metric and follows it through the pipeline (tests/telemetry/
    test_throwaway_metric.py): its table column is added to the model (models.Reading) with no
    migration, so the tables must be made from the models. Never set in production: a metric of the
    portal is an entry in BUILT_IN and a migration."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        entries = getattr(settings, "TELEMETRY_EXTRA_METRICS", ())
    except ImproperlyConfigured:  # read without Django's settings (a script): the built-in ones
        entries = ()
    return tuple(Metric(**entry) for entry in entries)


EXTRA: tuple[Metric, ...] = _extra()
METRICS: tuple[Metric, ...] = BUILT_IN + EXTRA
BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}


def names(**where) -> tuple[str, ...]:
    """The metrics' names, in table order, whose attributes equal `where` (e.g. live=True)."""
    return tuple(m.name for m in METRICS if all(getattr(m, key) == value for key, value in where.items()))


def rolled_up() -> tuple[str, ...]:
    """The metrics rolled up as min / max / mean per bucket, in table order."""
    return names(rollup=MIN_MAX_MEAN)


def as_json() -> list[dict]:
    """The registry as the pages read it (json_script): name, unit, wire type, label (untranslated:
    the page's view translates it), chart group, whether live points carry it and its rollup, in
    table order."""
    return [{key: value for key, value in asdict(metric).items() if key in _SERVED} for metric in METRICS]


_SERVED = ("name", "unit", "type", "label", "group", "live", "rollup")
