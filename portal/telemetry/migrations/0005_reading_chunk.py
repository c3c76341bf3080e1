"""Compressed readings, one row per GPU and hour: telemetry_chunk, PostgreSQL
only (services/compression.py describes the encoding). SQLite keeps raw readings only."""

import django.db.models.deletion
from django.db import migrations, models

# The reading columns as they were when this migration was written (one bytea each, gpu_id aside).
CHUNK_COLUMNS = (
    "ts", "temperature_c", "fan_speed_pct", "power_w", "power_limit_w", "energy_mj", "utilization_gpu_pct",
    "utilization_memory_pct", "memory_used_mib", "sm_clock_mhz", "mem_clock_mhz", "pstate", "throttle_reasons",
    "ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "retired_pages_pending",
    "remapped_rows_pending", "remapped_rows_failure", "pcie_link_gen", "pcie_link_width", "pcie_replay_count",
    "xid_count",
)  # fmt: skip
CREATE_SQL = [
    "CREATE TABLE telemetry_chunk ("
    "gpu_id bigint NOT NULL REFERENCES fleet_gpu (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED, "
    "start timestamptz NOT NULL, count integer NOT NULL, "
    + ", ".join(f"{name} bytea NOT NULL" for name in CHUNK_COLUMNS)
    + ", PRIMARY KEY (gpu_id, start))",
    *(f"ALTER TABLE telemetry_chunk ALTER COLUMN {name} SET STORAGE EXTERNAL" for name in CHUNK_COLUMNS),
]


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for statement in CREATE_SQL:
            cursor.execute(statement)


def drop(apps, schema_editor):
    """Going back turns every chunk into raw readings first (none is lost)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    # Decoding needs the codec: the live one reads every chunk ever written (its format is versioned
    # by the stored bytes, not by the code).
    from portal.telemetry.services import compression

    compression.chunks_restore_all()
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS telemetry_chunk")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0004_reading_partitioned_compact"), ("fleet", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The model, so that flush and the GPU's deletion know the table; created here on
            # PostgreSQL only (its foreign key cascades in the database).
            state_operations=[
                migrations.CreateModel(
                    name="ReadingChunk",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "gpu", "start", blank=True, editable=False, primary_key=True, serialize=False
                            ),
                        ),
                        ("start", models.DateTimeField()),
                        ("count", models.IntegerField()),
                        *((name, models.BinaryField()) for name in CHUNK_COLUMNS),
                        (
                            "gpu",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="+",
                                to="fleet.gpu",
                            ),
                        ),
                    ],
                    options={"db_table": "telemetry_chunk"},
                ),
            ],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
