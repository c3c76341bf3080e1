# ruff: noqa: DJ008 - wear rows are figures, never shown one by one
"""Wear meters per GPU: one row per GPU-hour with readings, and one state row per GPU (the newest
reading counted, the lifetime totals). Kept incrementally from ingest and never pruned (wear is
lifetime data, the raw readings are not): once a day is over, its hour rows are packed into its
day row (packing.py) and read back through hours.py as they were."""

from django.db import models

from portal.fleet.models import Gpu


class WearBucket(models.Model):
    """The meters of one GPU over one hour (WearHour) or one UTC day (WearDay, made of its hours,
    so that a year is 365 rows to read rather than 8,760)."""

    id = models.BigAutoField(primary_key=True)
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+", db_index=False)
    readings = models.PositiveIntegerField(default=0)
    powered_s = models.FloatField(default=0)
    busy_s = models.FloatField(default=0)
    hot_s = models.FloatField(default=0)
    fan_high_s = models.FloatField(default=0)
    energy_mj = models.FloatField(default=0)
    # the busy streak as a segment (meters.Streak)
    busy_prefix_s = models.FloatField(default=0)
    busy_suffix_s = models.FloatField(default=0)
    busy_longest_s = models.FloatField(default=0)
    busy_unbroken = models.BooleanField(default=True)
    # the hour's temperatures reduced to the hysteresis' turning points: [[offset_s, °C], ...]
    turns = models.JSONField(default=list)
    # the lifetime hysteresis at the end of this hour
    cycles_high = models.BooleanField(default=False)
    cycles_ref = models.FloatField(null=True)
    cycles_total = models.PositiveIntegerField(default=0)
    # thermal resistance at load: sums over busy readings with temperature and power
    load_n = models.PositiveIntegerField(default=0)
    load_temp_sum = models.FloatField(default=0)
    load_power_sum = models.FloatField(default=0)

    class Meta:
        abstract = True


class WearHour(WearBucket):
    hour = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "hour"], name="wearhour_gpu_hour")]


class WearDay(WearBucket):
    day = models.DateTimeField()  # UTC midnight
    # the day's hour rows packed (wear/packing.py) once the day is over for a while, and then no
    # WearHour rows of the day nor turning points of its own; NULL while they are rows (wear/hours.py)
    hours = models.BinaryField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "day"], name="wearday_gpu_day")]


class WearState(models.Model):
    """The newest reading counted (the next pair starts from it) and the lifetime totals."""

    gpu = models.OneToOneField(Gpu, on_delete=models.CASCADE, primary_key=True, related_name="wear")
    last_ts = models.DateTimeField()
    last_reading = models.JSONField()  # meters.READING_FIELDS, ts as epoch seconds
    powered_s = models.FloatField(default=0)
    busy_s = models.FloatField(default=0)
    hot_s = models.FloatField(default=0)
    fan_high_s = models.FloatField(default=0)
    energy_mj = models.FloatField(default=0)
    cycles_total = models.PositiveIntegerField(default=0)
    first_hour = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)
