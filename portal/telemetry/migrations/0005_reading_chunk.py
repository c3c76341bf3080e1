"""Compressed readings, one row per GPU and hour (issue 24): telemetry_chunk, PostgreSQL
only (services/compression.py describes the encoding). SQLite keeps raw readings only."""

import django.db.models.deletion
from django.db import migrations, models

from portal.telemetry.columns import READING_ROW_COLUMNS

from portal.telemetry.services import compression


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for statement in compression.create_sql():
            cursor.execute(statement)


def drop(apps, schema_editor):
    """Going back turns every chunk into raw readings first (none is lost)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    compression.chunks_restore_all()
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {compression.TABLE}")


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
                        *((name, models.BinaryField()) for name in READING_ROW_COLUMNS[1:]),
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
