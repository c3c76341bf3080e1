"""Reading series for rule tests, fed straight to the evaluation service with their own timestamps."""

import datetime as dt

from django.db import transaction

from portal.maintenance.rules.base import READING_COLUMNS
from portal.maintenance.services.evaluate import readings_evaluate

T0 = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.UTC)

HEALTHY = {
    "temperature_c": 65, "fan_speed_pct": 55, "power_w": 250.0, "power_limit_w": 300.0, "utilization_gpu_pct": 90,
    "sm_clock_mhz": 2400, "throttle_reasons": 0, "ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0,
    "ecc_uncorrected_aggregate": 0, "retired_pages_pending": False, "remapped_rows_pending": False,
    "remapped_rows_failure": False, "pcie_link_gen": 4, "pcie_link_width": 16, "pcie_replay_count": 0,
}  # fmt: skip


def row(ts: dt.datetime, **values) -> tuple:
    """One reading; unless given, the fan follows the temperature like a fan controller would."""
    merged = {**HEALTHY, **values, "ts": ts}
    if "fan_speed_pct" not in values:
        merged["fan_speed_pct"] = round(max(30, min(100, 30 + (merged["temperature_c"] - 50) * 2.5)))
    return tuple(merged[name] for name in READING_COLUMNS)


def series(values: list[dict], start: dt.datetime = T0, step_s: float = 10) -> list[tuple]:
    return [row(start + dt.timedelta(seconds=i * step_s), **v) for i, v in enumerate(values)]


def feed(gpu, rows: list[tuple], chunk: int = 30, xids=None):
    """Evaluate rows in batches of `chunk` readings, as agents would send them; returns every outcome."""
    outcomes = []
    for start in range(0, len(rows), chunk):
        with transaction.atomic():
            result = readings_evaluate(
                host_id=gpu.host_id, readings={gpu.pk: rows[start : start + chunk]}, xids=xids if start == 0 else None
            )
        outcomes += result.tickets
    if not rows and xids:
        with transaction.atomic():
            outcomes += readings_evaluate(host_id=gpu.host_id, readings={}, xids=xids).tickets
    return outcomes
