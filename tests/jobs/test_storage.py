"""Readings keep the jobs they name (ingest-v1 `jobs`): a job set id per reading, raw or compressed."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.telemetry.models import JobSet
from portal.telemetry.store import job_set_keys, readings_of
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch
from tests.telemetry.conftest import agent_for

pytestmark = pytest.mark.django_db


def _jobs_batch(now, jobs_per_reading):
    batch = make_batch("dgx-jobs", gpus=(gpu_uuid(1),), readings=len(jobs_per_reading), now=now,
                       step=dt.timedelta(seconds=10))  # fmt: skip
    for reading, jobs in zip(batch["readings"], jobs_per_reading, strict=True):
        if jobs is None:
            reading.pop("jobs", None)
        else:
            reading["jobs"] = jobs
    return batch


def test_each_reading_keeps_its_jobs_as_one_job_set_shared_by_equal_sets():
    agent = agent_for("dgx-jobs")
    now = timezone.now().replace(microsecond=0)
    jobs = [["slurm:41", "user:ana"], ["user:ana", "slurm:41"], [], None]
    answer = post_batch(agent.client, agent.token, _jobs_batch(now, jobs))
    assert answer.status_code == 202, answer.content
    rows = readings_of(gpu_ids=[agent.host.gpus.get().pk], columns=("ts", "job_set"))
    ids = [job_set for _, job_set in rows]
    assert ids[0] == ids[1] and ids[2] != ids[0] and ids[3] is None
    assert job_set_keys(ids) == {ids[0]: ("slurm:41", "user:ana"), ids[2]: ()}
    # a second batch naming the same jobs adds no job set
    again = post_batch(
        agent.client, agent.token, _jobs_batch(now + dt.timedelta(minutes=1), [["user:ana", "slurm:41"]])
    )
    assert again.status_code == 202
    assert JobSet.objects.count() == 2


def test_a_bad_job_key_stores_nothing():
    agent = agent_for("dgx-jobs")
    now = timezone.now().replace(microsecond=0)
    answer = post_batch(agent.client, agent.token, _jobs_batch(now, [["slurm:1"], ["nojob"]]))
    assert answer.status_code == 400
    assert "readings.1.jobs" in answer.content.decode()
    assert JobSet.objects.count() == 0
