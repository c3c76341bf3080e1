"""Readings keep their jobs (ingest-v1 `jobs`): a JobSet table of the key sets readings named, and
a 4-byte `job_set` column on the readings (null: the agent could not tell) and its compressed
column on telemetry_chunk (PostgreSQL only; the chunks written before hold "all null", b"\\x01")."""

from django.db import migrations, models


def chunk_column_add(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("ALTER TABLE telemetry_chunk ADD COLUMN job_set bytea NOT NULL DEFAULT '\\x01'::bytea")
        cursor.execute("ALTER TABLE telemetry_chunk ALTER COLUMN job_set DROP DEFAULT")
        cursor.execute("ALTER TABLE telemetry_chunk ALTER COLUMN job_set SET STORAGE EXTERNAL")


def chunk_column_drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("ALTER TABLE telemetry_chunk DROP COLUMN IF EXISTS job_set")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0010_batch_seen_digests")]

    operations = [
        migrations.CreateModel(
            name="JobSet",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("keys", models.TextField(unique=True)),
            ],
        ),
        migrations.AddField(model_name="reading", name="job_set", field=models.IntegerField(null=True)),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="readingchunk", name="job_set", field=models.BinaryField(), preserve_default=False
                ),
            ],
            database_operations=[migrations.RunPython(chunk_column_add, chunk_column_drop)],
        ),
    ]
