"""The wear figures of `GET /api/v1/gpus/{uuid}/wear` against the contract's definitions computed
from every reading (tests/wear/reference.py), on constructed series delivered in batches out of
order: gaps just under and over 120 s, energy counter resets, null stretches, temperature wiggles
under 30 °C, arbitrary from/to."""

import datetime as dt
import math
import random

import pytest

from portal.telemetry.models import Reading
from portal.wear.models import WearDay, WearHour, WearState
from portal.wear.selectors import wear_for_period
from tests.factories import GpuFactory
from tests.wear.reference import close, reference_wear
from tests.wear.stage import wear_count

T0 = dt.datetime(2026, 3, 1, 10, 17, 23, tzinfo=dt.UTC).timestamp()
FIGURES = ("powered_hours", "busy_hours", "hot_hours", "fan_high_hours", "longest_busy_hours", "energy_kwh")


def series(seed: int, n: int = 4000, step: float = 10) -> list[dict]:
    rng = random.Random(seed)
    out, ts, energy, temp = [], T0, 1e6, 40.0
    null_left = 0
    for _ in range(n):
        ts += rng.choice([1, 2, 5, 10, 30, 60, 119, 120, 121, 125, 400]) if rng.random() < 0.3 else step
        if rng.random() < 0.01:
            energy = rng.uniform(0, 5e3)  # driver reload: the counter starts again
        power = rng.choice([None, 80.0, 350.0, 690.5]) if rng.random() < 0.1 else 300.0
        energy += (power or 0) * 10 * 1000
        if rng.random() < 0.03:
            temp = rng.choice([35.0, 50.0, 72.0, 86.0, 90.0])
        if rng.random() < 0.01:
            null_left = rng.randint(1, 40)
        null_left = max(0, null_left - 1)
        out.append({
            "ts": ts,
            "temperature_c": None if null_left else round(temp + rng.uniform(-12, 12)),
            "fan_speed_pct": None if null_left else rng.choice([30, 79, 80, 95]),
            "power_w": power,
            "energy_mj": None if null_left or rng.random() < 0.02 else energy,
            "utilization_gpu_pct": None if null_left else rng.choice([0, 50, 89, 90, 100, 100, 100]),
        })  # fmt: skip
    return out


def store(gpu, readings):
    Reading.objects.bulk_create(
        Reading(gpu=gpu, ts=dt.datetime.fromtimestamp(r["ts"], tz=dt.UTC),
                **{k: v for k, v in r.items() if k != "ts"})
        for r in readings
    )  # fmt: skip


def deliver(gpu, readings, rng, batch=25, late_share=0.3):
    """Store in batches, some held back and delivered later (out of order), counting after each."""
    batches = [readings[i : i + batch] for i in range(0, len(readings), batch)]
    held = []
    for b in batches:
        if rng.random() < late_share:
            held.append(b)
            continue
        store(gpu, b)
        wear_count({gpu.pk: (b[0]["ts"], b[-1]["ts"])})
        if held and rng.random() < 0.3:
            late = held.pop(rng.randrange(len(held)))
            store(gpu, late)
            wear_count({gpu.pk: (late[0]["ts"], late[-1]["ts"])})
    for late in held:
        store(gpu, late)
        wear_count({gpu.pk: (late[0]["ts"], late[-1]["ts"])})


def check(gpu, readings, start, end):
    got = wear_for_period(
        gpu=gpu,
        start=None if math.isinf(start) else dt.datetime.fromtimestamp(start, tz=dt.UTC),
        end=None if math.isinf(end) else dt.datetime.fromtimestamp(end, tz=dt.UTC),
    ).as_dict()
    want = reference_wear(readings, start, end, slowdown=gpu.temp_slowdown_c)
    for name in FIGURES:
        assert close(got[name], want[name]), (name, start, end, got[name], want[name])
    assert got["thermal_cycles"] == want["thermal_cycles"], (start, end, got, want)


@pytest.mark.django_db
@pytest.mark.parametrize(("seed", "step"), [(1, 10), (2, 10), (3, 75)])  # 75 s: four days (day rows)
def test_figures_match_the_contract_with_late_batches_and_arbitrary_periods(seed, step):
    rng = random.Random(seed)
    gpu = GpuFactory(temp_slowdown_c=rng.choice([None, 87]))
    readings = series(seed, step=step)
    deliver(gpu, readings, rng)
    assert step < 60 or WearDay.objects.filter(gpu=gpu).count() >= 3
    end_ts = readings[-1]["ts"]
    check(gpu, readings, -math.inf, math.inf)
    for _ in range(25):
        a, b = sorted(rng.uniform(T0 - 600, end_ts + 600) for _ in range(2))
        check(gpu, readings, a, b)
        check(gpu, readings, -math.inf, b)
        check(gpu, readings, a, math.inf)
    hour = math.ceil(T0 / 3600) * 3600
    check(gpu, readings, hour, hour + 7200)  # on the hour
    day = math.ceil(T0 / 86400) * 86400
    check(gpu, readings, day, day + 86400)  # on the day
    check(gpu, readings, day - 5000.5, day + 2 * 86400 + 77.25)
    state = WearState.objects.get(gpu=gpu)
    whole = reference_wear(readings, slowdown=gpu.temp_slowdown_c)
    assert state.cycles_total == whole["thermal_cycles"]
    assert close(state.busy_s / 3600, whole["busy_hours"])


@pytest.mark.django_db
def test_figures_outlive_raw_retention():
    rng = random.Random(9)
    gpu = GpuFactory()
    readings = series(9, n=2000)
    deliver(gpu, readings, rng, late_share=0)
    Reading.objects.all().delete()
    check(gpu, readings, -math.inf, math.inf)
    hours = sorted(WearHour.objects.filter(gpu=gpu).values_list("hour", flat=True))
    check(gpu, readings, hours[1].timestamp(), hours[-2].timestamp())


@pytest.mark.django_db
def test_gap_edges_and_counter_reset_by_hand():
    gpu = GpuFactory(temp_slowdown_c=None)
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp()
    keys = ("ts", "temperature_c", "fan_speed_pct", "power_w", "energy_mj", "utilization_gpu_pct")
    rows = [
        dict(zip(keys, values, strict=True))
        for values in [
            (base, 40, 90, 100.0, 1000.0, 100),
            (base + 119.5, 80, 90, 100.0, 5000.0, 100),
            (base + 240, 45, 10, 100.0, 900.0, 100),
            (base + 300, None, None, 200.0, None, None),
            (base + 360, 76, None, None, 99.0, 95),
        ]
    ]
    store(gpu, rows)
    wear_count({gpu.pk: (None, None)})
    got = wear_for_period(gpu=gpu).as_dict()
    # 119.5 s covered (busy, hot at 80 °C, fan); 120.5 s gap covers nothing; 60 s (null: powered
    # only, 200 W × 60 s); 60 s (busy, energy counter: 99 after a null → power is null: nothing)
    assert got["powered_hours"] == pytest.approx(239.5 / 3600)
    assert got["busy_hours"] == pytest.approx(179.5 / 3600)
    assert got["longest_busy_hours"] == pytest.approx(119.5 / 3600)
    assert got["hot_hours"] == pytest.approx(119.5 / 3600)
    assert got["fan_high_hours"] == pytest.approx(119.5 / 3600)
    assert got["energy_kwh"] == pytest.approx((4000.0 + 200 * 60 * 1000) / 3.6e9)
    assert got["thermal_cycles"] == 2  # 40 → 80 (one), 80 → 45 (low), 45 → 76 (two)


@pytest.mark.django_db
def test_partial_hours_past_raw_retention_are_prorated_as_documented():
    """The contract says nothing of periods whose edges fall in hours whose raw readings retention
    deleted; the API documents what it does (portal/wear/api.py): the hour's figures in proportion."""
    gpu = GpuFactory(temp_slowdown_c=None)
    readings = series(5, n=1500)
    store(gpu, readings)
    wear_count({gpu.pk: (None, None)})
    hours = sorted(row.hour.timestamp() for row in WearHour.objects.filter(gpu=gpu))
    first, second = hours[1], hours[2]
    Reading.objects.all().delete()
    got = wear_for_period(
        gpu=gpu,
        start=dt.datetime.fromtimestamp(first + 900, tz=dt.UTC),
        end=dt.datetime.fromtimestamp(second + 1800, tz=dt.UTC),
    ).as_dict()
    rows = {row.hour.timestamp(): row for row in WearHour.objects.filter(gpu=gpu, hour__in=[
        dt.datetime.fromtimestamp(first, tz=dt.UTC), dt.datetime.fromtimestamp(second, tz=dt.UTC)])}  # fmt: skip
    prorated = (rows[first].powered_s * 0.75 + rows[second].powered_s * 0.5) / 3600
    assert got["powered_hours"] == pytest.approx(prorated)
    assert got["energy_kwh"] == pytest.approx((rows[first].energy_mj * 0.75 + rows[second].energy_mj * 0.5) / 3.6e9)
