"""Per-metric counts of known values in the 1-minute rollups: hours are built from
their minutes, and a mean over a nullable metric weighs each minute by them.

Existing minute rows are filled in: exactly, from the raw readings, for the minutes whose hours a
late batch may still rebuild (ingest refuses readings older than INGEST_MAX_AGE_HOURS; raw
retention keeps those); older ones get the minute's reading count where the metric's mean is known
and 0 where it is not (exact unless the metric was null in some but not all of the minute's
readings; no hour is rebuilt from them). Every minute row is rewritten: on a big table plan it as
downtime.
"""

import datetime as dt

from django.conf import settings
from django.db import migrations, models

METRICS = (
    "temperature_c", "fan_speed_pct", "power_w", "utilization_gpu_pct", "utilization_memory_pct",
    "memory_used_mib", "sm_clock_mhz", "mem_clock_mhz",
)  # fmt: skip


def fill_counts(apps, schema_editor):
    connection = schema_editor.connection
    # SQLite's UPDATE takes no alias before 3.33: the table by its name.
    table = "telemetry_rollup1m"
    if connection.vendor == "postgresql":
        minute_end = f"{table}.bucket + interval '1 minute'"
    else:
        minute_end = f"datetime({table}.bucket, '+1 minute')"
    readings = f"telemetry_reading r WHERE r.gpu_id = {table}.gpu_id AND r.ts >= {table}.bucket AND r.ts < {minute_end}"
    fallback = ", ".join(f"{metric}_count = CASE WHEN {metric}_mean IS NULL THEN 0 ELSE count END" for metric in METRICS)
    columns = ", ".join(f"{metric}_count" for metric in METRICS)
    counted = ", ".join(f"COUNT(r.{metric})" for metric in METRICS)
    since = dt.datetime.now(dt.UTC) - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS + 1)
    since = connection.ops.adapt_datetimefield_value(since.replace(minute=0, second=0, microsecond=0))
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET {fallback}")
        cursor.execute(
            f"UPDATE {table} SET ({columns}) = (SELECT {counted} FROM {readings}) "
            f"WHERE bucket >= %s AND EXISTS (SELECT 1 FROM {readings})",
            [since],
        )


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0005_reading_chunk")]

    operations = [
        *[
            migrations.AddField(model_name="rollup1m", name=f"{metric}_count", field=models.PositiveIntegerField(default=0))
            for metric in METRICS
        ],
        migrations.RunPython(fill_counts, migrations.RunPython.noop),
    ]
