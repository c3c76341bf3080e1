"""Compressed readings, one row per GPU and hour (issue 24): telemetry_chunk, PostgreSQL
only (services/compression.py describes the encoding). SQLite keeps raw readings only."""

from django.db import migrations

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
    dependencies = [("telemetry", "0004_reading_partitioned_compact")]

    operations = [migrations.RunPython(create, drop)]
