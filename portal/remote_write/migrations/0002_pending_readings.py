"""Pending samples stored one row per GPU and timestamp (PendingReading) instead of one per sample
(PendingSample): the samples waiting at the upgrade are carried over, merged by GPU and time."""

import json

import django.db.models.deletion
from django.db import migrations, models


def samples_to_readings(apps, schema_editor):
    PendingSample = apps.get_model("remote_write", "PendingSample")
    PendingReading = apps.get_model("remote_write", "PendingReading")
    readings: dict = {}
    for sample in PendingSample.objects.order_by("id").iterator(chunk_size=10_000):
        key = (sample.gpu_id, sample.ts)
        reading = readings.get(key)
        if reading is None:
            reading = readings[key] = {"samples": {}, "jobs": sample.jobs, "received_at": sample.received_at}
        reading["samples"].setdefault(sample.field, sample.value)
        reading["received_at"] = min(reading["received_at"], sample.received_at)
        if reading["jobs"] is None:
            reading["jobs"] = sample.jobs
    PendingReading.objects.bulk_create(
        [
            PendingReading(gpu_id=gpu_id, ts=ts, samples=json.dumps(reading["samples"], separators=(",", ":")),
                           jobs=reading["jobs"], received_at=reading["received_at"])  # fmt: skip
            for (gpu_id, ts), reading in readings.items()
        ],
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("remote_write", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="PendingReading",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("ts", models.DateTimeField()),
                ("samples", models.TextField()),
                ("jobs", models.TextField(null=True)),
                ("received_at", models.DateTimeField()),
                (
                    "gpu",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="remote_write.sourcegpu"
                    ),
                ),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("gpu", "ts"), name="pending_reading_once")],
            },
        ),
        migrations.RunPython(samples_to_readings, migrations.RunPython.noop),
        migrations.DeleteModel(name="PendingSample"),
    ]
