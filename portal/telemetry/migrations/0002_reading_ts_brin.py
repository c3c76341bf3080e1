from django.db import migrations


def create_brin(apps, schema_editor):
    # Readings arrive roughly in time order, so a BRIN index on ts is tiny and serves range
    # scans (retention, fleet-wide windows) as well as a B-tree would. PostgreSQL only.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("CREATE INDEX IF NOT EXISTS reading_ts_brin ON telemetry_reading USING brin (ts)")


def drop_brin(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS reading_ts_brin")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0001_initial")]
    operations = [migrations.RunPython(create_brin, drop_brin)]
