"""Demo history for the wear panels: 60 days of hourly meters before the demo's day of readings,
so that `make demo` shows the dust GPU's thermal resistance climbing as dust builds up and
dropping after a cleaning (a cleaning record 20 days ago), and the fleet wear page ranks GPUs
that were worked differently. Idempotent: a GPU that already has hours this old is left alone."""

from __future__ import annotations

import datetime as dt
import random

from django.db import transaction
from django.utils import timezone

from agents.simulate import MODEL, Effects, SimulatedGpu
from portal.fleet import hooks as fleet_hooks
from portal.fleet.models import Gpu, MaintenanceRecord
from portal.wear import meters
from portal.wear.models import WearHour, WearState
from portal.wear.services import wear_days_refresh

DAYS = 60
CLEANED_DAYS_AGO = 20
# hostname -> per GPU index: (busy share, hot share when busy, fan-high share, dusty)
PROFILES = {
    "sim-rack-b": {0: (0.85, 0.35, 0.5, True), 1: (0.8, 0.2, 0.7, False), 2: (0.6, 0.05, 0.1, False),
                   3: (0.4, 0.0, 0.05, False)},
    "sim-rack-a": {0: (0.9, 0.4, 0.6, False), 1: (0.7, 0.3, 0.3, False), 2: (0.5, 0.1, 0.1, False),
                   3: (0.5, 0.05, 0.1, False)},
    "sim-desk-c": {0: (0.3, 0.0, 0.0, False), 1: (0.2, 0.0, 0.0, False), 2: (0.3, 0.0, 0.0, False),
                   3: (0.25, 0.0, 0.0, False)},
}  # fmt: skip


LOAD_POWER_W = 0.9 * MODEL["power_limit_default_w"]
# Thermal resistance added per day by dust, against a clean card's: before the cleaning, and
# after it, when new filters keep most dust out.
DUST_PER_DAY, DUST_PER_DAY_FILTERED = 0.013, 0.002


def _clean_resistance(hostname: str, index: int) -> float:
    """The simulated card's own °C per W at load when clean (the simulator's physics), so that
    the history meets the live readings without a step."""
    gpu = SimulatedGpu(hostname, index, "healthy")
    temp, _fan = gpu.temperature_and_fan(LOAD_POWER_W, 1.0, Effects())
    return (temp - 25) / LOAD_POWER_W


def _resistance(day: int, clean: float, dusty: bool) -> float:
    """°C per W at load, `day` days into the history: dust adds up, the cleaning takes it away."""
    if not dusty:
        return clean
    cleaned_at = DAYS - CLEANED_DAYS_AGO
    if day < cleaned_at:
        return clean * (1 + DUST_PER_DAY * day)
    return clean * (1 + DUST_PER_DAY_FILTERED * (day - cleaned_at))


def wear_demo_seed(*, now: dt.datetime | None = None) -> int:
    """Returns the number of GPUs given history."""
    return _seed(now or timezone.now())


@transaction.atomic
def _seed(now: dt.datetime) -> int:
    end = meters.hour_of((now - dt.timedelta(days=2)).timestamp())
    start = end - DAYS * 86400
    rng = random.Random(16)
    seeded = 0
    gpus = Gpu.objects.filter(host__hostname__in=list(PROFILES)).select_related("host")
    for gpu in gpus:
        profile = PROFILES[gpu.host.hostname].get(gpu.index)
        if (
            profile is None
            or WearHour.objects.filter(gpu=gpu, hour__lt=dt.datetime.fromtimestamp(end, tz=dt.UTC)).exists()
        ):
            continue
        busy_share, hot_share, fan_share, dusty = profile
        clean = _clean_resistance(gpu.host.hostname, gpu.index)
        rows, cycles = [], 0
        totals = dict.fromkeys(("powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj"), 0.0)
        for h in range((end - start) // 3600):
            hour = start + h * 3600
            day = h // 24
            busy = 3600 * min(1.0, max(0.0, busy_share + rng.uniform(-0.25, 0.25)))
            resistance = _resistance(day, clean, dusty) * (1 + rng.uniform(-0.03, 0.03))
            power = LOAD_POWER_W + rng.uniform(-10, 10)
            temp = 25 + resistance * power
            hot = busy * hot_share * (1.6 if resistance > 1.2 * clean else 1.0)
            if rng.random() < 0.12:
                cycles += 1
            row = WearHour(
                gpu=gpu, hour=dt.datetime.fromtimestamp(hour, tz=dt.UTC), readings=360, powered_s=3600.0,
                busy_s=busy, hot_s=min(hot, busy), fan_high_s=busy * fan_share,
                energy_mj=(busy * power + (3600 - busy) * MODEL["idle_w"]) * 1000, busy_prefix_s=0.0, busy_suffix_s=0.0,
                busy_longest_s=busy, busy_unbroken=False, turns=[], cycles_high=False, cycles_ref=None,
                cycles_total=cycles, load_n=max(1, int(busy / 10)),
            )  # fmt: skip
            row.load_temp_sum = temp * row.load_n
            row.load_power_sum = power * row.load_n
            for name in totals:
                totals[name] += getattr(row, name)
            rows.append(row)
        WearHour.objects.bulk_create(rows, batch_size=2000)
        wear_days_refresh({gpu.pk: {start + d * 86400 - start % 86400 for d in range(DAYS + 2)}})
        state = WearState.objects.filter(gpu=gpu).first()
        if state is None:
            last = float(end - 1)
            WearState.objects.create(
                gpu=gpu, last_ts=dt.datetime.fromtimestamp(last, tz=dt.UTC),
                last_reading=[last, None, None, None, None, None],
                first_hour=dt.datetime.fromtimestamp(start, tz=dt.UTC),
                cycles_total=cycles, **totals,
            )  # fmt: skip
        else:
            for name, value in totals.items():
                setattr(state, name, getattr(state, name) + value)
            state.cycles_total += cycles
            state.first_hour = min(state.first_hour, dt.datetime.fromtimestamp(start, tz=dt.UTC))
            state.save()
        if dusty:
            record, created = MaintenanceRecord.objects.get_or_create(
                kind=MaintenanceRecord.Kind.CLEANING, host=gpu.host, gpu=gpu,
                performed_at=dt.datetime.fromtimestamp(start + (DAYS - CLEANED_DAYS_AGO) * 86400 + 36000, tz=dt.UTC),
                defaults={"performed_by": "demo", "dust_level": "heavy", "airflow_ok": True,
                          "notes": "Heatsink fins matted with dust; blown out, filters replaced."},
            )  # fmt: skip
            if created:
                fleet_hooks.record_saved.call(record=record)
        seeded += 1
    return seeded
