"""Each GPU's latest state: the newest reading wins, whatever order batches arrive in."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.telemetry.models import GpuLatest
from tests.telemetry.batches import gpu_uuid, make_batch, make_reading

pytestmark = pytest.mark.django_db

A, B = gpu_uuid(1), gpu_uuid(2)


def latest(uuid):
    row = GpuLatest.objects.get(gpu__uuid=uuid)
    return row.ts, row.temperature_c


def with_temperature(batch, value):
    for reading in batch["readings"]:
        reading["temperature_c"] = value
    return batch


def test_a_late_batch_does_not_overwrite_the_newer_latest(agent):
    now = timezone.now().replace(microsecond=0)
    assert (
        agent.post(with_temperature(make_batch(agent.hostname, gpus=[A, B], readings=4, now=now), 70)).status_code
        == 202
    )
    assert latest(A) == (now, 70)

    # the agent's spool delivers an older batch afterwards
    late = with_temperature(make_batch(agent.hostname, gpus=[A, B], readings=4, now=now - dt.timedelta(minutes=10)), 50)
    assert agent.post(late).status_code == 202

    assert latest(A) == (now, 70)
    assert latest(B) == (now, 70)
    # a late batch for one GPU and a new one for the other: each GPU decided on its own
    mixed = make_batch(agent.hostname, gpus=[A, B], readings=0)
    mixed["readings"] = [
        make_reading(A, now - dt.timedelta(minutes=1), temperature_c=40),
        make_reading(B, now + dt.timedelta(seconds=5), temperature_c=80),
    ]
    assert agent.post(mixed).status_code == 202
    assert latest(A) == (now, 70)
    assert latest(B) == (now + dt.timedelta(seconds=5), 80)


def test_a_newer_batch_replaces_the_latest_and_order_inside_a_batch_does_not_matter(agent):
    now = timezone.now().replace(microsecond=0)
    assert (
        agent.post(with_temperature(make_batch(agent.hostname, gpus=[A], readings=2, now=now), 60)).status_code == 202
    )
    batch = make_batch(agent.hostname, gpus=[A], readings=0)
    batch["readings"] = [
        make_reading(A, now + dt.timedelta(seconds=3), temperature_c=66, power_w=None),
        make_reading(A, now + dt.timedelta(seconds=1), temperature_c=61),
    ]
    assert agent.post(batch).status_code == 202
    row = GpuLatest.objects.get(gpu__uuid=A)
    assert (row.ts, row.temperature_c, row.power_w) == (now + dt.timedelta(seconds=3), 66, None)
    assert row.received_at >= now
