"""Nothing lost to a long outage: readings up to INGEST_MAX_AGE_HOURS (7 days) old are stored,
rolled up although newer ones were rolled up first, and retention never deletes raw readings
the rollups have not covered yet."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.telemetry.models import Reading, Rollup1h, Rollup1m
from portal.telemetry.services.retention import raw_cutoff, telemetry_prune
from tests.pipeline import rollups_process_pending, stage_waiting
from tests.telemetry.batches import gpu_uuid, make_batch

pytestmark = pytest.mark.django_db

A = gpu_uuid(1)


def test_a_long_weekend_of_readings_is_accepted_by_default(agent, settings):
    assert settings.INGEST_MAX_AGE_HOURS == 168
    now = timezone.now()
    response = agent.post(make_batch(agent.hostname, gpus=[A], readings=3, now=now - dt.timedelta(hours=72)))
    assert response.status_code == 202, response.content
    response = agent.post(make_batch(agent.hostname, gpus=[A], readings=1, now=now - dt.timedelta(days=7, hours=1)))
    assert response.status_code == 400
    assert response.json()["detail"][0]["loc"] == "readings.0.ts"
    assert "168 h" in response.json()["detail"][0]["msg"]


def test_the_window_is_a_setting(agent, settings):
    settings.INGEST_MAX_AGE_HOURS = 24
    response = agent.post(make_batch(agent.hostname, gpus=[A], readings=1, now=timezone.now() - dt.timedelta(hours=25)))
    assert response.status_code == 400 and "24 h" in response.content.decode()


def test_a_late_batch_older_than_everything_rolled_up_is_rolled_up(agent):
    now = timezone.now().replace(second=30, microsecond=0)
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=5, now=now)).status_code == 202
    assert rollups_process_pending() == 1
    late_at = now - dt.timedelta(hours=72)
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=4, now=late_at)).status_code == 202
    assert rollups_process_pending() == 1
    minute = late_at.replace(second=0)
    assert Rollup1m.objects.get(gpu__uuid=A, bucket=minute).count == 4
    assert Rollup1h.objects.get(gpu__uuid=A, bucket=minute.replace(minute=0)).count == 4
    assert Rollup1m.objects.get(gpu__uuid=A, bucket=now.replace(second=0)).count == 5


def test_retention_keeps_raw_readings_the_rollups_have_not_covered(agent, settings):
    settings.RETENTION_RAW_DAYS = 2
    now = timezone.now()
    late_at = now - dt.timedelta(days=3)
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=4, now=late_at)).status_code == 202
    # Not rolled up yet: kept, whatever the retention says.
    settings.INGEST_MAX_AGE_HOURS = 24  # (so that only the pending batch protects them)
    assert raw_cutoff(now) <= late_at - dt.timedelta(seconds=3)
    assert telemetry_prune(now=now)["readings"] == 0
    assert Reading.objects.count() == 4
    rollups_process_pending()
    assert stage_waiting("rollups") == 0
    assert telemetry_prune(now=now)["readings"] == 4  # covered now: they may go


def test_retention_keeps_what_a_late_reading_may_still_be_rolled_up_with(agent, settings):
    # RETENTION_RAW_DAYS below the ingest window: a late reading would be rolled up with its
    # minute and hour's other readings gone, so retention keeps the whole window.
    settings.RETENTION_RAW_DAYS = 3
    now = timezone.now()
    batch = make_batch(agent.hostname, gpus=[A], readings=2, now=now - dt.timedelta(days=5))
    assert agent.post(batch).status_code == 202
    rollups_process_pending()
    assert telemetry_prune(now=now)["readings"] == 0
    assert raw_cutoff(now) <= now - dt.timedelta(hours=168)
