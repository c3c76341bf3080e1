"""Readings keyed by (gpu, ts), no surrogate id; on PostgreSQL partitioned by day.

The table is rebuilt and its rows copied over (a second reading of a GPU at the same instant is
dropped). PostgreSQL: a table partitioned by RANGE (ts), a partition per UTC day (the days of the
stored rows, and those ingest may write to: services/partitions.py), no default partition; the
columns widest first so that no alignment padding sits between them; the primary key (gpu_id, ts)
is the only B-tree, a BRIN index on ts serves fleet-wide time scans. SQLite: the same table with
the composite key, and an index on ts for retention's chunked delete.

Going back rebuilds the old table (new ids). On a big existing table the copy takes minutes per
hundred million rows, with the table locked: plan it as downtime.
"""

import datetime as dt

from django.db import migrations, models

import portal.telemetry.models

COUNTERS = ("ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "pcie_replay_count")

# Widest first: 8-byte, 4-byte, 2-byte, then 1-byte columns and the short variable-length ones
# (PostgreSQL pads each column to its type's alignment, so this order stores no padding between
# columns).
PG_COLUMNS = (
    ("ts", "timestamp with time zone NOT NULL"),
    ("gpu_id", "bigint NOT NULL"),
    ("energy_mj", "double precision"),
    ("power_w", "real"),
    ("power_limit_w", "real"),
    ("memory_used_mib", "integer"),
    ("sm_clock_mhz", "integer"),
    ("mem_clock_mhz", "integer"),
    ("temperature_c", "smallint"),
    ("fan_speed_pct", "smallint"),
    ("utilization_gpu_pct", "smallint"),
    ("utilization_memory_pct", "smallint"),
    ("pstate", "smallint"),
    ("throttle_reasons", "smallint"),
    ("pcie_link_gen", "smallint"),
    ("pcie_link_width", "smallint"),
    ("xid_count", "smallint NOT NULL"),
    ("retired_pages_pending", "boolean"),
    ("remapped_rows_pending", "boolean"),
    ("remapped_rows_failure", "boolean"),
    # Counters, almost always 0: numeric takes 3 bytes for 0 (a short varlena, not aligned).
    ("ecc_corrected_volatile", "numeric(19)"),
    ("ecc_uncorrected_volatile", "numeric(19)"),
    ("ecc_uncorrected_aggregate", "numeric(19)"),
    ("pcie_replay_count", "numeric(19)"),
)


def pg_create_sql(table: str = "telemetry_reading") -> list[str]:
    """The partitioned table (bench/storage.py builds its copies with this too)."""
    columns = ",\n    ".join(f"{name} {sql_type}" for name, sql_type in PG_COLUMNS)
    return [
        f"""CREATE TABLE {table} (
    {columns},
    CONSTRAINT {table}_pkey PRIMARY KEY (gpu_id, ts),
    CONSTRAINT {table}_gpu_fk FOREIGN KEY (gpu_id) REFERENCES fleet_gpu (id) DEFERRABLE INITIALLY DEFERRED
) PARTITION BY RANGE (ts)""",
        f"CREATE INDEX {'reading_ts_brin' if table == 'telemetry_reading' else table + '_ts_brin'} "
        f"ON {table} USING brin (ts)",
    ]


def day_partition_sql(day) -> str:
    """A day's partition, as this migration created it (later partitions are the hourly task's and
    post_migrate's: services/partitions.py)."""
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=1)
    return (
        f"CREATE TABLE IF NOT EXISTS telemetry_reading_p{day:%Y%m%d} PARTITION OF telemetry_reading "
        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )


def rebuild(apps, schema_editor):
    names = ", ".join(name for name, _ in PG_COLUMNS)
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS reading_gpu_ts")
            cursor.execute("DROP INDEX IF EXISTS reading_ts_brin")
            cursor.execute("ALTER TABLE telemetry_reading RENAME TO telemetry_reading_old")
            cursor.execute("ALTER TABLE telemetry_reading_old RENAME CONSTRAINT telemetry_reading_pkey TO telemetry_reading_old_pkey")
            for statement in pg_create_sql():
                cursor.execute(statement)
            cursor.execute("SELECT DISTINCT date_trunc('day', ts AT TIME ZONE 'UTC')::date FROM telemetry_reading_old")
            # The stored rows' days; the days ingest may write to come from the post_migrate hook.
            for (day,) in cursor.fetchall():
                cursor.execute(day_partition_sql(day))
            cursor.execute(
                f"INSERT INTO telemetry_reading ({names}) SELECT {names} FROM telemetry_reading_old "
                "ON CONFLICT DO NOTHING"
            )
            cursor.execute("DROP TABLE telemetry_reading_old")
        return
    Reading = apps.get_model("telemetry", "Reading")  # noqa: N806 - a model
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS reading_gpu_ts")
        cursor.execute("ALTER TABLE telemetry_reading RENAME TO telemetry_reading_old")
    schema_editor.create_model(Reading)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"INSERT OR IGNORE INTO telemetry_reading ({names}) SELECT {names} FROM telemetry_reading_old")
        cursor.execute("DROP TABLE telemetry_reading_old")
        cursor.execute("CREATE INDEX reading_ts ON telemetry_reading (ts)")


def back(apps, schema_editor):
    """The layout before: a surrogate id, a (gpu, ts) index (and on PostgreSQL a BRIN on ts), one
    table; the rows copied back."""
    postgres = schema_editor.connection.vendor == "postgresql"
    old_types = {"throttle_reasons": "integer", **{name: "bigint" for name in COUNTERS}}
    columns = [(name, old_types.get(name, sql_type)) for name, sql_type in PG_COLUMNS]
    if not postgres:
        columns = [(name, sql_type.replace("timestamp with time zone", "datetime")) for name, sql_type in columns]
    names = ", ".join(name for name, _ in columns)
    identity = "bigint GENERATED BY DEFAULT AS IDENTITY" if postgres else "integer NOT NULL"
    autoincrement = "" if postgres else " AUTOINCREMENT"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS reading_ts_brin")
        cursor.execute("DROP INDEX IF EXISTS reading_ts")
        cursor.execute("ALTER TABLE telemetry_reading RENAME TO telemetry_reading_new")
        if postgres:
            cursor.execute("ALTER TABLE telemetry_reading_new RENAME CONSTRAINT telemetry_reading_pkey TO telemetry_reading_new_pkey")
        definitions = ", ".join(f"{name} {sql_type}" for name, sql_type in columns)
        cursor.execute(
            f"CREATE TABLE telemetry_reading (id {identity} PRIMARY KEY{autoincrement}, {definitions}, "
            "FOREIGN KEY (gpu_id) REFERENCES fleet_gpu (id) DEFERRABLE INITIALLY DEFERRED)"
        )
        cursor.execute(f"INSERT INTO telemetry_reading ({names}) SELECT {names} FROM telemetry_reading_new ORDER BY ts")
        cursor.execute("DROP TABLE telemetry_reading_new")
        cursor.execute("CREATE INDEX reading_gpu_ts ON telemetry_reading (gpu_id, ts)")
        if postgres:
            cursor.execute("CREATE INDEX reading_ts_brin ON telemetry_reading USING brin (ts)")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0003_pipeline_ledger"), ("fleet", "0001_initial")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="reading", name="reading_gpu_ts"),
                migrations.RemoveField(model_name="reading", name="id"),
                migrations.AddField(
                    model_name="reading",
                    name="pk",
                    field=models.CompositePrimaryKey(
                        "gpu", "ts", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                migrations.AlterField(
                    model_name="reading", name="throttle_reasons", field=models.SmallIntegerField(null=True)
                ),
                *(
                    migrations.AlterField(model_name="reading", name=name, field=portal.telemetry.models.CounterField(null=True))
                    for name in COUNTERS
                ),
            ],
        ),
        migrations.RunPython(rebuild, back, elidable=False),
    ]

