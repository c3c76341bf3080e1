# ruff: noqa: DJ008 - rows of telemetry tables are never shown one by one
"""Telemetry: host tokens, ingested batches, raw readings, rollups and each GPU's latest state.

The readings table is the hot one: narrow typed columns, the GPU and time as its key, no per-row
JSON. On PostgreSQL it is partitioned by day (see Reading), with a BRIN index on time for
fleet-wide time scans.
"""

from django.conf import settings
from django.db import models

from portal.core import engine
from portal.fleet.models import Gpu, Host
from portal.telemetry import metrics
from portal.telemetry.columns import READING_METRICS, READING_ROW_COLUMNS  # noqa: F401 - described there


class RealField(models.FloatField):
    """A 4-byte float on PostgreSQL (sensor values have far fewer significant digits)."""

    def db_type(self, connection):
        return engine.single_precision_type(connection) or super().db_type(connection)


class CounterField(models.BigIntegerField):
    """A 64-bit counter that is almost always small (ECC errors, PCIe replays): a `numeric` on
    PostgreSQL, 3 bytes for 0 and 5 for up to 9,999, unaligned, where a bigint takes 8 bytes and
    aligns the row to 8. Read back as int."""

    def db_type(self, connection):
        return engine.small_counter_type(connection) or super().db_type(connection)

    def from_db_value(self, value, expression, connection):
        return None if value is None else int(value)


# Bit positions for the protocol's clock event reason names; stored as one integer per reading.
THROTTLE_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks_setting",
)
THROTTLE_BIT = {name: 1 << position for position, name in enumerate(THROTTLE_REASONS)}
THERMAL_THROTTLE_MASK = THROTTLE_BIT["hw_thermal"] | THROTTLE_BIT["sw_thermal"] | THROTTLE_BIT["hw_slowdown"]


def throttle_names(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for name in THROTTLE_REASONS if mask & THROTTLE_BIT[name]]


class HostToken(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="tokens")
    label = models.CharField(max_length=100, blank=True)
    # The visible start of the token, so an admin can tell tokens apart without the secret.
    prefix = models.CharField(max_length=16, db_index=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # A token the agent got by rotation (host_token_rotate): the token it replaces, revoked when the
    # first batch arrives with this one; then cleared.
    replaces = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.prefix}… ({self.host.hostname})"


class IngestBatch(models.Model):
    """One accepted batch: the idempotency key, and the pipeline's work queue (StageDone)."""

    batch_id = models.UUIDField(unique=True)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="+")
    sent_at = models.DateTimeField()
    received_at = models.DateTimeField(db_index=True)
    reading_count = models.PositiveIntegerField()
    first_ts = models.DateTimeField(null=True)
    last_ts = models.DateTimeField(null=True)


class BatchSeen(models.Model):
    """The batches of a host whose first reading is in one hour, an 8-byte digest of each id, once
    every stage has finished them: the idempotency keys kept compactly for as long as ingest
    accepts the batches' readings (services/batches.py). Recent and unfinished batches keep
    their IngestBatch row."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="+", db_index=False)
    hour = models.DateTimeField()
    ids = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "hour"], name="batch_seen_host_hour")]
        indexes = [models.Index(fields=["hour"], name="batch_seen_hour")]


class StageDone(models.Model):
    """The pipeline's ledger: `stage` has finished batch `batch_pk`, written in the transaction
    that commits the stage's own effects (portal.telemetry.pipeline). Rows below the cursor are
    folded into it."""

    stage = models.CharField(max_length=40)
    batch_pk = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["batch_pk", "stage"], name="stage_done_once")]


class PipelineCursor(models.Model):
    """Every batch with an id below `done_below` is finished by every stage (one row)."""

    done_below = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)


class Reading(models.Model):
    """One sample of one GPU. (gpu, ts) is the key: no surrogate id (8 bytes of heap and a
    second B-tree per reading). A second reading of a GPU at the same instant, from a
    misbehaving agent, is dropped by every write path (ON CONFLICT DO NOTHING).

    On PostgreSQL the table is partitioned by RANGE (ts), a partition per UTC day
    (services/partitions.py creates them ahead; retention drops whole days), and the columns
    are stored widest first so that no alignment padding sits between them (migration 0004).
    SQLite keeps one plain table."""

    pk = models.CompositePrimaryKey("gpu", "ts")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+", db_index=False)
    ts = models.DateTimeField()
    temperature_c = models.SmallIntegerField(null=True)
    fan_speed_pct = models.SmallIntegerField(null=True)
    power_w = RealField(null=True)
    power_limit_w = RealField(null=True)
    energy_mj = models.FloatField(null=True)
    utilization_gpu_pct = models.SmallIntegerField(null=True)
    utilization_memory_pct = models.SmallIntegerField(null=True)
    memory_used_mib = models.IntegerField(null=True)
    # The protocol allows up to 100,000 MHz, past a smallint.
    sm_clock_mhz = models.IntegerField(null=True)
    mem_clock_mhz = models.IntegerField(null=True)
    pstate = models.SmallIntegerField(null=True)
    throttle_reasons = models.SmallIntegerField(null=True)  # THROTTLE_BIT: 9 bits
    # NVML's counters are 64-bit (the protocol allows up to 2**62), and almost always 0.
    ecc_corrected_volatile = CounterField(null=True)
    ecc_uncorrected_volatile = CounterField(null=True)
    ecc_uncorrected_aggregate = CounterField(null=True)
    retired_pages_pending = models.BooleanField(null=True)
    remapped_rows_pending = models.BooleanField(null=True)
    remapped_rows_failure = models.BooleanField(null=True)
    pcie_link_gen = models.SmallIntegerField(null=True)
    pcie_link_width = models.SmallIntegerField(null=True)
    pcie_replay_count = CounterField(null=True)
    xid_count = models.SmallIntegerField(default=0)
    # The jobs on the GPU at `ts` (ingest-v1 `jobs`) as a JobSet id: 4 bytes, whatever the keys;
    # null where the agent cannot tell (an older agent). No foreign key: job sets are never deleted.
    job_set = models.IntegerField(null=True)


def _add_extra_metric_columns(model) -> None:
    """The columns of metrics added from the environment (metrics.EXTRA, tests only: no migration)."""
    fields = {
        metrics.SMALL: models.SmallIntegerField, metrics.INTEGER: models.IntegerField, metrics.REAL: RealField,
        metrics.DOUBLE: models.FloatField, metrics.COUNTER: CounterField, metrics.FLAG: models.BooleanField,
    }  # fmt: skip
    for metric in metrics.EXTRA:
        model.add_to_class(metric.name, fields[metric.codec](null=True))


_add_extra_metric_columns(Reading)


class JobSet(models.Model):
    """A set of job keys some reading named (ingest-v1 `jobs`), stored once: a reading keeps its
    id, so the readings (raw or compressed) keep their jobs at 4 bytes each. `keys` holds the
    sorted keys joined by one space (a key has no space); the empty set is the row with "".
    Never deleted (readings point at it without a foreign key)."""

    keys = models.TextField(unique=True)

    def key_list(self) -> list[str]:
        return self.keys.split(" ") if self.keys else []


class ReadingChunk(models.Model):
    """A GPU's readings of one hour, compressed (services/compression.py): PostgreSQL only (the
    table exists there, from migration 0005). One bytea per reading column. Read through
    telemetry.store (the one door to readings), never row by row. The GPU's deletion cascades in the database."""

    pk = models.CompositePrimaryKey("gpu", "start")
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, related_name="+", db_index=False)
    start = models.DateTimeField()
    count = models.IntegerField()

    class Meta:
        db_table = "telemetry_chunk"


for _column in READING_ROW_COLUMNS[1:]:
    ReadingChunk.add_to_class(_column, models.BinaryField())


class XidEvent(models.Model):
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    ts = models.DateTimeField()
    code = models.PositiveIntegerField()
    batch = models.ForeignKey(IngestBatch, on_delete=models.SET_NULL, null=True, related_name="+")

    class Meta:
        indexes = [models.Index(fields=["gpu", "ts"], name="xid_gpu_ts")]


class GpuLatest(models.Model):
    """The newest reading of each GPU, for the fleet page (one join, whatever the fleet size)."""

    gpu = models.OneToOneField(Gpu, on_delete=models.CASCADE, primary_key=True, related_name="latest")
    ts = models.DateTimeField()
    received_at = models.DateTimeField()
    temperature_c = models.SmallIntegerField(null=True)
    fan_speed_pct = models.SmallIntegerField(null=True)
    power_w = RealField(null=True)
    power_limit_w = RealField(null=True)
    utilization_gpu_pct = models.SmallIntegerField(null=True)
    memory_used_mib = models.IntegerField(null=True)
    throttle_reasons = models.IntegerField(null=True)

    @property
    def throttle_reason_names(self) -> list[str] | None:
        return throttle_names(self.throttle_reasons)


# Metrics rolled up as min / max / mean per bucket (the registry's, portal/telemetry/metrics.py).
ROLLUP_METRICS = metrics.rolled_up()


class RollupBase(models.Model):
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+", db_index=False)
    bucket = models.DateTimeField()
    count = models.PositiveIntegerField()
    thermal_throttle_count = models.PositiveIntegerField(default=0)
    xid_count = models.PositiveIntegerField(default=0)
    energy_mj_max = models.FloatField(null=True)

    class Meta:
        abstract = True


def _add_rollup_columns(model):
    for metric in ROLLUP_METRICS:
        for stat in ("min", "max", "mean"):
            model.add_to_class(f"{metric}_{stat}", RealField(null=True))


class Rollup1m(RollupBase):
    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "bucket"], name="rollup1m_gpu_bucket")]


class Rollup1h(RollupBase):
    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "bucket"], name="rollup1h_gpu_bucket")]


def _add_known_counts(model):
    """Each metric's known (non-null) values in the bucket: a coarser bucket built from these
    weighs each one's mean by them (services/rollups.py)."""
    for metric in ROLLUP_METRICS:
        model.add_to_class(f"{metric}_count", models.PositiveIntegerField(default=0))


_add_rollup_columns(Rollup1m)
_add_rollup_columns(Rollup1h)
_add_known_counts(Rollup1m)

# A rollup row's stored values, in the order the chunk tables (services/rollup_chunks.py) hold them.
ROLLUP_HOUR_FIELDS = (
    "count", "thermal_throttle_count", "xid_count", "energy_mj_max",
    *(f"{metric}_{stat}" for metric in ROLLUP_METRICS for stat in ("min", "max", "mean")),
)  # fmt: skip
ROLLUP_MINUTE_FIELDS = (*ROLLUP_HOUR_FIELDS, *(f"{metric}_count" for metric in ROLLUP_METRICS))


class RollupChunkBase(models.Model):
    """A GPU's rollups of one UTC day (minutes) or month (hours), compressed with the readings' codec
    (services/rollup_chunks.py): PostgreSQL only (the tables exist there, from migration 0008).
    `buckets` (the rows it holds), then `bucket` and every rollup field one bytea each. Read
    through telemetry.store.rollups_of, never row by row. The GPU's deletion cascades in the database."""

    pk = models.CompositePrimaryKey("gpu", "start")
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, related_name="+", db_index=False)
    start = models.DateTimeField()
    buckets = models.IntegerField()  # how many rollup rows it holds
    bucket = models.BinaryField()

    class Meta:
        abstract = True


class Rollup1mChunk(RollupChunkBase):
    class Meta:
        db_table = "telemetry_rollup1m_chunk"


class Rollup1hChunk(RollupChunkBase):
    class Meta:
        db_table = "telemetry_rollup1h_chunk"


for _field in ROLLUP_MINUTE_FIELDS:
    Rollup1mChunk.add_to_class(_field, models.BinaryField())
for _field in ROLLUP_HOUR_FIELDS:
    Rollup1hChunk.add_to_class(_field, models.BinaryField())
