"""Raw retention waits for the wear meters: readings of a batch the meters have not counted yet (a
worker down for longer than raw retention) are kept until they are, and the figures then match the
contract over every reading."""

import datetime as dt
import math
import uuid as uuidlib

import pytest

from portal.telemetry.models import GpuLatest, IngestBatch, Reading
from portal.telemetry.pipeline import pipeline_run
from portal.telemetry.services.retention import raw_cutoff, telemetry_prune
from tests.factories import GpuFactory
from tests.wear.test_wear import check, series, store

NOW = dt.datetime(2026, 3, 20, 12, tzinfo=dt.UTC)  # series() starts on 2026-03-01


@pytest.fixture(autouse=True)
def _retention(settings, wear_on_ingest):
    settings.RETENTION_RAW_DAYS = 2
    settings.INGEST_MAX_AGE_HOURS = 24


def store_batch(gpu, readings) -> IngestBatch:
    """Readings stored as ingest stores them: with their batch, which the pipeline then owes."""
    store(gpu, readings)
    first, last = (dt.datetime.fromtimestamp(readings[i]["ts"], tz=dt.UTC) for i in (0, -1))
    return IngestBatch.objects.create(
        batch_id=uuidlib.uuid4(), host=gpu.host, sent_at=last, received_at=last, reading_count=len(readings),
        first_ts=first, last_ts=last,
    )  # fmt: skip


def latest(gpu):
    last = Reading.objects.filter(gpu=gpu).order_by("-ts").first()
    GpuLatest.objects.update_or_create(gpu=gpu, defaults={"ts": last.ts, "received_at": last.ts})


@pytest.mark.django_db
def test_readings_not_counted_yet_outlive_retention_until_counted():
    counted, waiting = GpuFactory(), GpuFactory()
    readings = {gpu.pk: series(gpu.pk, n=1200) for gpu in (counted, waiting)}
    for gpu in (counted, waiting):
        store_batch(gpu, readings[gpu.pk][:600])
    pipeline_run()
    store_batch(counted, readings[counted.pk][600:])
    pipeline_run()
    pending = store_batch(waiting, readings[waiting.pk][600:])  # stored, not counted: the worker is down
    for gpu in (counted, waiting):
        latest(gpu)
    cutoff = raw_cutoff(NOW)
    assert cutoff == pending.first_ts.replace(minute=0, second=0, microsecond=0)
    deleted = telemetry_prune(now=NOW)["readings"]
    assert deleted > 0  # the readings before it went as ever
    assert not Reading.objects.filter(ts__lt=cutoff).exists()
    assert Reading.objects.filter(gpu=waiting, ts__gte=pending.first_ts).count() == 600
    # the worker is back: everything gets counted, then retention takes the rest
    assert pipeline_run().finished["wear"] == 1
    assert raw_cutoff(NOW) == (NOW - dt.timedelta(days=2)).replace(minute=0)
    telemetry_prune(now=NOW)
    assert not Reading.objects.exists()
    for gpu in (counted, waiting):
        check(gpu, readings[gpu.pk], -math.inf, math.inf)


@pytest.mark.django_db
def test_readings_of_a_gpu_the_meters_have_not_met_are_kept():
    gpu = GpuFactory()
    readings = series(7, n=600)
    store_batch(gpu, readings)
    latest(gpu)
    assert raw_cutoff(NOW) <= Reading.objects.order_by("ts").first().ts
    assert telemetry_prune(now=NOW)["readings"] == 0
    pipeline_run()
    assert telemetry_prune(now=NOW)["readings"] == 600
    check(gpu, readings, -math.inf, math.inf)
