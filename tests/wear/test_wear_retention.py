"""Raw retention waits for the wear meters: readings the meters have not counted yet (a worker down
for longer than raw retention) are kept until they are, and the figures then match the contract
over every reading."""

import datetime as dt
import math

import pytest

from portal.telemetry.models import GpuLatest, Reading
from portal.telemetry.services.retention import raw_cutoff, telemetry_prune
from portal.wear.models import WearState
from portal.wear.services import wear_update_many
from tests.factories import GpuFactory
from tests.wear.test_wear import check, series, store

NOW = dt.datetime(2026, 3, 20, 12, tzinfo=dt.UTC)  # series() starts on 2026-03-01


@pytest.fixture(autouse=True)
def _retention(settings):
    settings.WEAR_ON_INGEST = True
    settings.RETENTION_RAW_DAYS = 2
    settings.INGEST_MAX_AGE_HOURS = 24


def latest(gpu):
    last = Reading.objects.filter(gpu=gpu).order_by("-ts").first()
    GpuLatest.objects.update_or_create(gpu=gpu, defaults={"ts": last.ts, "received_at": last.ts})


@pytest.mark.django_db
def test_readings_not_counted_yet_outlive_retention_until_counted():
    counted, waiting = GpuFactory(), GpuFactory()
    readings = {gpu.pk: series(gpu.pk, n=1200) for gpu in (counted, waiting)}
    for gpu in (counted, waiting):
        store(gpu, readings[gpu.pk][:600])
    wear_update_many(ranges=dict.fromkeys([counted.pk, waiting.pk], (None, None)))
    store(counted, readings[counted.pk][600:])
    wear_update_many(ranges={counted.pk: (None, None)})
    store(waiting, readings[waiting.pk][600:])  # stored, not counted: the worker is down
    for gpu in (counted, waiting):
        latest(gpu)
    waiting_from = WearState.objects.get(gpu=waiting).last_ts
    cutoff = raw_cutoff(NOW)
    assert cutoff == waiting_from.replace(minute=0, second=0, microsecond=0)
    deleted = telemetry_prune(now=NOW)["readings"]
    assert deleted > 0  # the readings before it went as ever
    assert not Reading.objects.filter(ts__lt=cutoff).exists()
    assert Reading.objects.filter(gpu=waiting, ts__gt=waiting_from).count() == 600
    # the worker is back: everything gets counted, then retention takes the rest
    wear_update_many(ranges={waiting.pk: (None, None)})
    assert raw_cutoff(NOW) == (NOW - dt.timedelta(days=2)).replace(minute=0)
    telemetry_prune(now=NOW)
    assert not Reading.objects.exists()
    for gpu in (counted, waiting):
        check(gpu, readings[gpu.pk], -math.inf, math.inf)


@pytest.mark.django_db
def test_readings_of_a_gpu_the_meters_have_not_met_are_kept():
    gpu = GpuFactory()
    readings = series(7, n=600)
    store(gpu, readings)
    latest(gpu)
    assert raw_cutoff(NOW) <= Reading.objects.order_by("ts").first().ts
    assert telemetry_prune(now=NOW)["readings"] == 0
    wear_update_many(ranges={gpu.pk: (None, None)})
    assert telemetry_prune(now=NOW)["readings"] == 600
    check(gpu, readings, -math.inf, math.inf)


@pytest.mark.django_db
def test_meters_off_hold_nothing_back(settings):
    settings.WEAR_ON_INGEST = False
    gpu = GpuFactory()
    store(gpu, series(gpu.pk, n=300))
    latest(gpu)
    telemetry_prune(now=NOW)
    assert not Reading.objects.exists()
