"""Finished batch rows fold into compact idempotency keys (8 bytes a batch in a row per host and
hour of its first reading), and a batch sent again after its row went, stamped with a new
`sent_at` as the agent does at every attempt, is still answered as a duplicate that writes
nothing; keys go once ingest would refuse their readings as too old anyway."""

import datetime as dt
import uuid as uuidlib

import pytest
from django.utils import timezone

from portal.telemetry.models import BatchSeen, IngestBatch
from portal.telemetry.pipeline import pipeline_run
from portal.telemetry.services.batches import batch_key, batch_keys_prune, batches_fold, hour_of
from tests.telemetry.batches import gpu_uuid, iso, make_batch

pytestmark = pytest.mark.django_db
A, B = gpu_uuid(0), gpu_uuid(1)


def _old_batch(agent, hours_ago: float, minute: int = 10):
    """A batch sent `minute` minutes into the hour `hours_ago` hours back."""
    at = hour_of(timezone.now() - dt.timedelta(hours=hours_ago)) + dt.timedelta(minutes=minute)
    return make_batch(agent.hostname, gpus=[A, B], readings=4, now=at)


def _fold_later(hours: float = 2) -> int:
    pipeline_run()  # every stage finishes what waits (the worker does this after each batch)
    return batches_fold(now=timezone.now() + dt.timedelta(hours=hours))


def test_a_folded_batch_sent_again_is_a_duplicate_that_writes_nothing(agent, counts):
    batch = _old_batch(agent, hours_ago=3)
    assert agent.post(batch).status_code == 202
    assert _fold_later() == 1
    assert IngestBatch.objects.count() == 0
    (key,) = BatchSeen.objects.all()
    assert bytes(key.ids) == batch_key(uuidlib.UUID(batch["batch_id"]))
    assert len(bytes(key.ids)) == 8
    first = min(dt.datetime.fromisoformat(reading["ts"]) for reading in batch["readings"])
    assert key.hour == hour_of(first)
    before = counts()

    again = agent.post(batch)
    assert (again.status_code, again.json()) == (200, {"accepted": 0, "duplicate": True})
    assert counts() == before

    # As the agent sends it again after an outage: the same id and readings, sent_at of this attempt.
    resent = {**batch, "sent_at": iso(timezone.now())}
    again = agent.post(resent)
    assert (again.status_code, again.json()) == (200, {"accepted": 0, "duplicate": True})
    assert counts() == before

    # Another batch of the same hour is new, and joins the same key row when folded.
    other = _old_batch(agent, hours_ago=3, minute=20)
    assert agent.post(other).json()["duplicate"] is False
    assert _fold_later() == 1
    (key,) = BatchSeen.objects.all()
    assert len(bytes(key.ids)) == 16


def test_a_recent_batch_is_answered_by_its_row(agent):
    batch = make_batch(agent.hostname, gpus=[A], readings=1)
    assert agent.post(batch).status_code == 202
    assert _fold_later(hours=0) == 0  # not FOLD_AFTER old yet
    assert agent.post(batch).json() == {"accepted": 0, "duplicate": True}


def test_only_finished_batches_fold_and_folding_twice_adds_nothing(agent):
    assert agent.post(_old_batch(agent, hours_ago=3)).status_code == 202
    # No stage has run yet: the batch is still the pipeline's work, whatever its age.
    assert batches_fold(now=timezone.now() + dt.timedelta(hours=2)) == 0
    assert IngestBatch.objects.count() == 1
    assert _fold_later() == 1
    assert _fold_later() == 0
    assert len(bytes(BatchSeen.objects.get().ids)) == 8


def test_a_batch_without_readings_folds_without_a_key(agent):
    at = hour_of(timezone.now() - dt.timedelta(hours=3)) + dt.timedelta(minutes=10)
    assert agent.post(make_batch(agent.hostname, gpus=[A], readings=0, now=at)).status_code == 202
    assert _fold_later() == 1
    assert IngestBatch.objects.count() == 0
    assert BatchSeen.objects.count() == 0


def test_keys_go_when_their_readings_would_be_refused_anyway(agent, settings):
    settings.INGEST_MAX_AGE_HOURS = 48
    for hours in (3, 30):
        assert agent.post(_old_batch(agent, hours_ago=hours)).status_code == 202
    assert _fold_later() == 2
    assert BatchSeen.objects.count() == 2
    assert batch_keys_prune(now=timezone.now() + dt.timedelta(hours=20)) == 1  # the 30-hour-old one
    assert BatchSeen.objects.count() == 1
    assert batch_keys_prune(now=timezone.now() + dt.timedelta(hours=20)) == 0
