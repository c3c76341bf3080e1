"""A small lab with known wear for the browser test (tests/browser/test_wear_pages_in_browser.py): host
`wear-lab`, three GPUs with DAYS days of readings every STEP_S seconds through the real meters,
a cleaning in the middle (the evening before day CLEANED_DAY). Run inside the served portal's
database: `manage.py shell -c "from tests.wear.seed import wear_lab_seed; wear_lab_seed()"`.

Each day (UTC) a GPU is busy (100 % utilization, BUSY_TEMP + dust) for its first `busy_h` hours
and idle (0 %, IDLE_TEMP) for the rest; power comes without an energy counter. The dusty GPU's
busy temperature climbs a degree every second day since its last cleaning, so its thermal
resistance at load climbs and drops on the cleaning day."""

import datetime as dt

from django.db import connection
from django.utils import timezone

from portal.fleet import services as fleet_services
from portal.fleet.models import Gpu
from portal.telemetry.models import Reading
from tests.wear.stage import wear_count

HOST = "wear-lab"
DAYS = 40
STEP_S = 120  # every pair covered (a gap of at most 120 s covers)
CLEANED_DAY = 24
# index: (slowdown °C, busy hours a day, busy °C, idle °C, busy W, idle W, fan % busy, dusty)
GPUS = {
    0: (80, 20, 70, 40, 600.0, 80.0, 90, True),
    1: (90, 12, 65, 40, 450.0, 70.0, 50, False),
    2: (90, 4, 50, 35, 300.0, 60.0, 40, False),
}


def start_of_history(now: dt.datetime) -> dt.datetime:
    midnight = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - dt.timedelta(days=DAYS + 1)


SEEDED_COLUMNS = ("gpu_id", "ts", "temperature_c", "fan_speed_pct", "power_w", "energy_mj", "utilization_gpu_pct",
                  "xid_count")  # fmt: skip


def _readings_insert(rows: list[tuple]) -> None:
    """Rows of SEEDED_COLUMNS, in one prepared INSERT: the ORM's bulk_create spent three quarters of
    the seed's 30 s of CPU building 86,400 model instances into SQL."""
    table, columns = Reading._meta.db_table, ", ".join(SEEDED_COLUMNS)
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(SEEDED_COLUMNS))})",
            [(gpu_id, adapt(ts), *metrics) for gpu_id, ts, *metrics in rows],
        )


def wear_lab_seed() -> dict:
    now = timezone.now()
    start = start_of_history(now)
    host = fleet_services.host_create(hostname=HOST, location="browser test", rack="W1", owner="wear", contact="")
    gpus = {}
    for index, (slowdown, *_rest) in GPUS.items():
        gpus[index] = Gpu.objects.create(
            host=host, uuid=f"GPU-wear-lab-{index}", index=index, model_name="NVIDIA H100 80GB HBM3",
            temp_slowdown_c=slowdown, install_date=(now - dt.timedelta(days=500)).date(),
        )  # fmt: skip
    cleaned_at = start + dt.timedelta(days=CLEANED_DAY, hours=-2)  # the evening before, after the day's load
    fleet_services.record_create(kind="cleaning", host=host, gpu=gpus[0], performed_at=cleaned_at,
                                 performed_by="Li Wei", dust_level="heavy", airflow_ok=True)  # fmt: skip
    per_day = 86400 // STEP_S
    for index, (_slowdown, busy_h, busy_c, idle_c, busy_w, idle_w, fan, dusty) in GPUS.items():
        rows = []
        for i in range(DAYS * per_day):
            day, second = divmod(i * STEP_S, 86400)
            busy = second < busy_h * 3600
            since_clean = day - CLEANED_DAY if day >= CLEANED_DAY else day
            temp = busy_c + (since_clean // 2 if dusty else 0) if busy else idle_c
            rows.append((gpus[index].pk, start + dt.timedelta(seconds=i * STEP_S), temp, fan if busy else 30,
                         busy_w if busy else idle_w, None, 100 if busy else 0, 0))  # fmt: skip
        _readings_insert(rows)
    wear_count({gpu.pk: (None, None) for gpu in gpus.values()})
    # the raw readings go as retention would take them: wear is lifetime data
    Reading.objects.filter(gpu__host=host).delete()
    return {"start": start.isoformat(), "cleaned_at": cleaned_at.isoformat()}
