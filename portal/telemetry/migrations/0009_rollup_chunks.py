"""Compressed rollups: telemetry_rollup1m_chunk (a row per GPU and UTC day) and
telemetry_rollup1h_chunk (a row per GPU and month), PostgreSQL only (services/rollup_chunks.py describes them). SQLite keeps
raw rollup rows only."""

import django.db.models.deletion
from django.db import migrations, models

METRICS = (
    "temperature_c", "fan_speed_pct", "power_w", "utilization_gpu_pct", "utilization_memory_pct",
    "memory_used_mib", "sm_clock_mhz", "mem_clock_mhz",
)  # fmt: skip
# The rollup fields as they were when this migration was written (one bytea each, with `bucket`).
HOUR_FIELDS = (
    "count", "thermal_throttle_count", "xid_count", "energy_mj_max",
    *(f"{metric}_{stat}" for metric in METRICS for stat in ("min", "max", "mean")),
)  # fmt: skip
MINUTE_FIELDS = (*HOUR_FIELDS, *(f"{metric}_count" for metric in METRICS))
TABLES = {"telemetry_rollup1m_chunk": MINUTE_FIELDS, "telemetry_rollup1h_chunk": HOUR_FIELDS}


def _create_sql(table: str, fields: tuple[str, ...]) -> list[str]:
    columns = ("bucket", *fields)
    return [
        f"CREATE TABLE {table} ("
        "gpu_id bigint NOT NULL REFERENCES fleet_gpu (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED, "
        "start timestamptz NOT NULL, buckets integer NOT NULL, "
        + ", ".join(f"{name} bytea NOT NULL" for name in columns)
        + ", PRIMARY KEY (gpu_id, start))",
        # Stored as written (zlib already), out of line only when a row is past 2 kB.
        *(f"ALTER TABLE {table} ALTER COLUMN {name} SET STORAGE EXTERNAL" for name in columns),
    ]


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table, fields in TABLES.items():
            for statement in _create_sql(table, fields):
                cursor.execute(statement)


def drop(apps, schema_editor):
    """Going back turns every compressed day into raw rollup rows first (none is lost)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    from portal.telemetry.services import rollup_chunks

    rollup_chunks.chunks_restore_all()
    with schema_editor.connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")


def _model(name: str, table: str, fields: tuple[str, ...]):
    return migrations.CreateModel(
        name=name,
        fields=[
            ("pk", models.CompositePrimaryKey("gpu", "start", blank=True, editable=False, primary_key=True, serialize=False)),
            ("start", models.DateTimeField()),
            ("buckets", models.IntegerField()),
            ("bucket", models.BinaryField()),
            *((field, models.BinaryField()) for field in fields),
            (
                "gpu",
                models.ForeignKey(
                    db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name="+", to="fleet.gpu"
                ),
            ),
        ],
        options={"db_table": table, "abstract": False},
    )


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0008_host_token_replaces"), ("fleet", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The models, so that flush and the GPU's deletion know the tables; created here on
            # PostgreSQL only (their foreign keys cascade in the database).
            state_operations=[
                _model("Rollup1hChunk", "telemetry_rollup1h_chunk", HOUR_FIELDS),
                _model("Rollup1mChunk", "telemetry_rollup1m_chunk", MINUTE_FIELDS),
            ],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
