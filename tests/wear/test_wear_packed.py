"""Packed hours (portal/wear/hours.py, packing.py): every wear reader gives exactly the same answer
before and after a GPU's days are packed ("nothing a chart, a report or an audit reads may change
its answer because data got older"), a late batch into a packed day is counted as if nothing had
been packed, and the codec gives back every value bit for bit."""

import datetime as dt
import importlib
import math
import random
import struct

import pytest
from django.db import connection

from portal.telemetry.models import Reading
from portal.wear import hours, packing
from portal.wear.hours import hours_read, hours_unfold, wear_hours_fold
from portal.wear.models import WearDay, WearHour
from portal.wear.selectors import fleet_wear_ranking, gpu_wear_panel, meters_since, wear_for_period, wear_lifetime_all
from tests.factories import GpuFactory
from tests.wear.stage import wear_count
from tests.wear.test_wear import T0, series, store

DAY = 86400


def _utc(seconds):
    return None if math.isinf(seconds) else dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _deliver(gpus, readings, rng, late_share=0.2):
    """The same readings to each GPU, in batches of 40, some held back and delivered late."""
    batches = [readings[i : i + 40] for i in range(0, len(readings), 40)]
    held = []
    for batch in batches:
        if rng.random() < late_share:
            held.append(batch)
            continue
        for gpu in gpus:
            store(gpu, batch)
        wear_count({gpu.pk: (batch[0]["ts"], batch[-1]["ts"]) for gpu in gpus})
    for late in held:
        for gpu in gpus:
            store(gpu, late)
        wear_count({gpu.pk: (late[0]["ts"], late[-1]["ts"]) for gpu in gpus})


def _windows(rng, start, end):
    hour, day = math.ceil(start / 3600) * 3600, math.ceil(start / DAY) * DAY
    windows = [(-math.inf, math.inf), (hour, hour + 7200), (day, day + DAY), (day - 5000.5, day + 2 * DAY + 77.25),
               (day + 3600, day + DAY + 7200), (day - 1800, day + 1800), (day + 900, day + 2700)]  # fmt: skip
    for _ in range(30):
        a, b = sorted(rng.uniform(start - 600, end + 600) for _ in range(2))
        windows += [(a, b), (-math.inf, b), (a, math.inf), (math.floor(a / 3600) * 3600, b)]
    return windows


def _answers(gpu, client, windows, start):
    """What every wear reader says about `gpu`: periods (the selector and the API), the GPU page's
    panel, the usage meters since several moments, the fleet ranking, the totals /metrics reads."""
    answers = {"periods": [wear_for_period(gpu=gpu, start=_utc(a), end=_utc(b)).as_dict() for a, b in windows]}
    url = f"/api/v1/gpus/{gpu.uuid}/wear"
    answers["api"] = [
        client.get(url, {key: _utc(value).isoformat() for key, value in (("from", a), ("to", b)) if _utc(value)}).json()
        for a, b in windows[::7]
    ]
    answers["panel"] = gpu_wear_panel(gpu=gpu)
    moments = [None, start, start + 3600 * 5.5, start + DAY + 7, math.ceil(start / DAY) * DAY + 2 * DAY]
    answers["since"] = [
        meters_since(host_ids=[gpu.host_id], since={gpu.host_id: _utc(m or -math.inf)})[gpu.host_id] for m in moments
    ]
    ranking = fleet_wear_ranking(now=_utc(start + 10 * DAY))
    answers["ranking"] = [(row["gpu"].pk, row["figures"], row["score"]) for row in ranking["rows"]]
    answers["totals"] = wear_lifetime_all()
    return answers


@pytest.mark.django_db
def test_every_reader_answers_the_same_once_the_days_are_packed(client_for, viewer):
    rng = random.Random(35)
    gpu = GpuFactory(temp_slowdown_c=87)
    readings = series(35, n=5000, step=75)  # four days and more
    _deliver([gpu], readings, rng)
    end = readings[-1]["ts"]
    # the first day's raw readings are past retention: its partial hours are prorated from the rows
    Reading.objects.filter(ts__lt=_utc(math.ceil(T0 / DAY) * DAY + 3600 * 3)).delete()
    client = client_for(viewer)
    windows = _windows(rng, T0, end)
    rows_before = hours_read({gpu.pk: (-math.inf, math.inf)})
    before = _answers(gpu, client, windows, T0)

    packed = wear_hours_fold(now=_utc(end + 3 * DAY))
    assert packed == WearDay.objects.filter(gpu=gpu).count() >= 4
    assert not WearHour.objects.filter(gpu=gpu).exists()
    assert hours_read({gpu.pk: (-math.inf, math.inf)}) == rows_before
    assert _answers(gpu, client, windows, T0) == before
    assert wear_hours_fold(now=_utc(end + 3 * DAY)) == 0  # nothing left to pack

    hours_unfold({gpu.pk: -math.inf})
    assert not WearDay.objects.filter(gpu=gpu, hours__isnull=False).exists()
    assert hours_read({gpu.pk: (-math.inf, math.inf)}) == rows_before
    assert _answers(gpu, client, windows, T0) == before


@pytest.mark.django_db
def test_a_late_batch_into_a_packed_day_counts_as_if_nothing_was_packed(client_for, viewer):
    """Two GPUs get the same readings; one has its days packed before the late batches come, the
    other not: the meters and every answer end up the same."""
    rng = random.Random(7)
    packed_gpu, raw_gpu = GpuFactory(temp_slowdown_c=None), GpuFactory(temp_slowdown_c=None)
    readings = series(7, n=4000, step=75)
    late = [readings[i : i + 40] for i in (300, 1400, 2000)]  # in the first, second and third days
    on_time = [r for i, r in enumerate(readings) if not any(300 <= i - k < 340 for k in (0, 1100, 1700))]
    _deliver([packed_gpu, raw_gpu], on_time, rng, late_share=0)
    end = readings[-1]["ts"]
    assert wear_hours_fold(now=_utc(end + 2 * DAY)) >= 3
    hours_unfold({raw_gpu.pk: -math.inf})
    for batch in late:
        for gpu in (packed_gpu, raw_gpu):
            store(gpu, batch)
        wear_count({gpu.pk: (batch[0]["ts"], batch[-1]["ts"]) for gpu in (packed_gpu, raw_gpu)})
    # the late batches unpacked the days from theirs on
    assert not WearDay.objects.filter(gpu=packed_gpu, hours__isnull=False).exists()
    _assert_same(packed_gpu, raw_gpu, client_for(viewer), _windows(rng, T0, end))


@pytest.mark.django_db
def test_days_whose_rows_were_written_newest_first_are_packed_whole():
    """The newest day's readings were counted first, the older days' came late: their day rows
    were inserted newest first (PostgreSQL reads them back in that order without an ORDER BY),
    and packing still keeps every hour of every day."""
    gpu = GpuFactory(temp_slowdown_c=87)
    readings = series(9, n=4000, step=75)  # three days and more
    days = {}
    for reading in readings:
        days.setdefault(reading["ts"] // DAY, []).append(reading)
    for _, day_readings in sorted(days.items(), reverse=True):
        store(gpu, day_readings)
        wear_count({gpu.pk: (day_readings[0]["ts"], day_readings[-1]["ts"])})
    assert len(days) >= 3
    rows_before = hours_read({gpu.pk: (-math.inf, math.inf)})
    assert len(rows_before) > 48
    if connection.vendor == "postgresql":  # a bitmap or sequential scan: the rows in their heap order
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_indexscan = off")
    assert wear_hours_fold(now=_utc(readings[-1]["ts"] + 3 * DAY)) == len(days)
    assert hours_read({gpu.pk: (-math.inf, math.inf)}) == rows_before


@pytest.mark.django_db
def test_a_gpu_reporting_again_after_its_days_were_packed_counts_on(client_for, viewer):
    """The hour a GPU's meters continue lies in a packed day (it was silent for days): the stage
    counts its new readings as if nothing had been packed."""
    rng = random.Random(8)
    packed_gpu, raw_gpu = GpuFactory(temp_slowdown_c=87), GpuFactory(temp_slowdown_c=87)
    readings = series(8, n=4000, step=75)
    _deliver([packed_gpu, raw_gpu], readings[:2500], rng, late_share=0)
    assert wear_hours_fold(now=_utc(readings[2499]["ts"] + 2 * DAY)) >= 3
    hours_unfold({raw_gpu.pk: -math.inf})
    _deliver([packed_gpu, raw_gpu], readings[2500:], rng, late_share=0.1)
    _assert_same(packed_gpu, raw_gpu, client_for(viewer), _windows(rng, T0, readings[-1]["ts"]))


def _assert_same(gpu_a, gpu_b, client, windows):
    """Every answer about the two GPUs and their hour rows are the same."""

    def without_gpu(gpu, answers):
        answers.pop("ranking")
        answers["api"] = [{**answer, "uuid": None} for answer in answers["api"]]
        answers["totals"] = [row[2:] for row in answers["totals"] if row[0] == gpu.uuid]
        answers["panel"]["lifetime"].pop("since")
        return answers

    got = [without_gpu(gpu, _answers(gpu, client, windows, T0)) for gpu in (gpu_a, gpu_b)]
    assert got[0] == got[1]
    rows = [[row[2:] for row in hours_read({gpu.pk: (-math.inf, math.inf)})] for gpu in (gpu_a, gpu_b)]
    assert rows[0] == rows[1]


def _bits(values):
    return [struct.pack("<d", v) if isinstance(v, float) else v for v in values]


def _turns(rng, kind, hour):
    if kind == "whole":
        return [[float(rng.randrange(3600)), float(rng.randrange(-40, 120))] for _ in range(rng.randrange(0, 15))]
    if kind == "micros":  # epoch seconds from whole microseconds (datetime.timestamp()), less the hour
        return [[(hour * 10**6 + rng.randrange(3600 * 10**6)) / 10**6 - hour, float(rng.randrange(20, 95))]
                for _ in range(rng.randrange(0, 15))]  # fmt: skip
    return [[rng.uniform(0, 3600), rng.uniform(20, 95)] for _ in range(rng.randrange(0, 15))]


@pytest.mark.parametrize("kind", ["whole", "micros", "exact"])
def test_the_codec_gives_back_every_value_bit_for_bit(kind):
    rng = random.Random(3)
    day = DAY * 20000
    hours_in = []
    for at in sorted(rng.sample(range(24), 19)):
        powered = rng.choice([3600.0, rng.uniform(0, 3600), 0.0, -0.0, 1e-300, 2.0**60])
        values = {
            "powered_s": powered, "busy_s": rng.choice([powered, 0.0, 12.5]), "hot_s": rng.choice([0.0, powered]),
            "fan_high_s": rng.uniform(0, 10), "energy_mj": rng.uniform(1e9, 2e9), "readings": rng.randrange(4000),
            "busy_prefix_s": powered, "busy_suffix_s": float(rng.randrange(3600)), "busy_longest_s": float("nan"),
            "busy_unbroken": rng.random() < 0.5, "turns": _turns(rng, kind, day + at * 3600),
            "cycles_high": rng.random() < 0.5, "cycles_ref": rng.choice([None, 45.0, 45.5, -3.25]),
            "cycles_total": 1000 - at, "load_n": rng.randrange(400), "load_temp_sum": float(rng.randrange(10**6)),
            "load_power_sum": rng.uniform(0, 1e5),
        }  # fmt: skip
        hours_in.append((at, tuple(values[name] for name in packing.FIELDS)))
    data = packing.pack(hours_in, 1000, day)
    assert data[2] == ["exact", "whole", "micros"].index(kind)  # the form chosen
    back = packing.unpack(data, 1000, day)
    turns_at = packing.FIELDS.index("turns")
    for (at, values), (at_back, values_back) in zip(hours_in, back, strict=True):
        assert at == at_back
        assert _bits(values[:turns_at] + values[turns_at + 1 :]) == _bits(
            values_back[:turns_at] + values_back[turns_at + 1 :]
        )
        assert [_bits(point) for point in values[turns_at]] == [_bits(point) for point in values_back[turns_at]]
    assert packing.unpack(packing.pack([], 0, 0), 0, 0) == []
    assert hours.FIELDS == packing.FIELDS


@pytest.mark.django_db
def test_the_migration_packs_the_days_over_and_unpacks_them_back(client_for, viewer):
    """Its copy of the codec (a migration imports no live code) packs as hours.py reads."""
    from django.apps import apps

    migration = importlib.import_module("portal.wear.migrations.0002_wearday_hours_packed")
    rng = random.Random(2)
    gpu = GpuFactory(temp_slowdown_c=87)
    readings = series(2, n=3000, step=75)
    _deliver([gpu], readings, rng)
    client = client_for(viewer)
    windows = _windows(rng, T0, readings[-1]["ts"])[:40]
    rows_before = hours_read({gpu.pk: (-math.inf, math.inf)})
    days_before = list(WearDay.objects.filter(gpu=gpu).order_by("day").values_list("day", "turns"))
    before = _answers(gpu, client, windows, T0)
    migration.fold(apps, None)
    assert not WearHour.objects.filter(gpu=gpu).exists()
    assert hours_read({gpu.pk: (-math.inf, math.inf)}) == rows_before
    assert _answers(gpu, client, windows, T0) == before
    migration.unfold(apps, None)
    assert hours_read({gpu.pk: (-math.inf, math.inf)}) == rows_before
    assert list(WearDay.objects.filter(gpu=gpu).order_by("day").values_list("day", "turns")) == days_before
