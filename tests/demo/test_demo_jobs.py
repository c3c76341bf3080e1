"""The demo's jobs: a week of three users' jobs on the demo GPUs (none while a GPU was out for
repair), alice's job that the repair story's XID 79 interrupted, bob's idle notebook job, alice's
flat-out run, all in the usage report; the simulated Slurm jobs named as accounting would; and the
simulator's job dying with its GPU on an XID 79."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from agents.simulate import SimulatedDeviceClient, host_job_schedule
from portal.demo import jobs as demo_jobs
from portal.demo import repair, story
from portal.fleet.models import Gpu, GpuStatusChange
from portal.jobs.models import Job, JobSpan

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", verbosity=0)
    story.prepare_simulated_hosts()
    story.backfill_history(span=dt.timedelta(minutes=10))
    assert repair.repair_story_seed() is True
    return timezone.now()


def test_a_week_of_jobs_of_three_users(demo, client_for, viewer):
    now = demo
    written = demo_jobs.jobs_history_seed(now=now, live_from=now - dt.timedelta(minutes=10))
    assert written > 50
    assert demo_jobs.jobs_history_seed(now=now) == 0  # once
    seeded = Job.objects.filter(key__startswith="slurm:7")
    assert set(seeded.values_list("user", flat=True)) == {"alice", "bob", "chen"}
    assert set(seeded.values_list("account", flat=True)) == {"vision", "nlp", "students"}
    assert JobSpan.objects.filter(started_at__lt=now - dt.timedelta(days=6)).exists()
    # no span on a GPU while it was out for repair (sim-desk-c GPU 0's repair story)
    gpu = Gpu.objects.get(host__hostname="sim-desk-c", index=0)
    out = GpuStatusChange.objects.get(gpu=gpu, to_status="out_for_repair").changed_at
    back = GpuStatusChange.objects.filter(gpu=gpu, to_status="in_service", changed_at__gt=out).first().changed_at
    assert not JobSpan.objects.filter(gpu=gpu, started_at__lt=back, ended_at__gt=out).exists()

    interrupted = Job.objects.get(interrupted=True)
    assert (interrupted.user, interrupted.gpu_hours_lost) == ("alice", pytest.approx(12.0))
    ticket = JobSpan.objects.filter(job=interrupted, gpu=gpu).get().interrupted_by
    assert ticket.rule == "xid_bus"
    notebook = Job.objects.get(name="jupyter-notebook")
    assert (notebook.user, notebook.idle) == ("bob", True)

    period = {"from": (now - dt.timedelta(days=7)).isoformat(), "to": (now + dt.timedelta(minutes=1)).isoformat()}
    body = client_for(viewer).get("/api/v1/reports/usage", period).json()
    users = {row["user"]: row for row in body["users"]}
    assert {"alice", "bob", "chen"} <= set(users)
    assert users["bob"]["idle_gpu_hours"] == pytest.approx(10, abs=0.1)  # two GPUs, five hours (to a minute ago)
    assert users["alice"]["interrupted_jobs"] == 1 and users["alice"]["gpu_hours_lost"] == pytest.approx(12.0)
    assert len(body["days"]) == 8 and all(day["gpu_hours_busy"] > 0 for day in body["days"][1:])
    assert {run["host"] for run in body["flat_out"]} == {"dgx-01"}
    assert len({row["model"] for row in body["models"]}) == 4


def test_simulated_slurm_jobs_are_named_from_the_schedule(demo):
    schedule = host_job_schedule("sim-rack-a")
    keys = {schedule.job_key(k): k for k in range(40)}
    slurm = [key for key in keys if key.startswith("slurm:")]
    for key in [*slurm, "slurm:42", "user:chen"]:
        Job.objects.create(key=key, scheduler=key.split(":")[0], user="chen" if key == "user:chen" else None,
                           started_at=demo, ended_at=demo)  # fmt: skip
    assert demo_jobs.simulated_jobs_name() == len(slurm)
    for key in slurm:
        job = Job.objects.get(key=key)
        assert job.user == schedule.job_user(keys[key])
        assert job.account == demo_jobs.ACCOUNTS[job.user] and job.lookup == "done"
    assert Job.objects.get(key="slurm:42").user is None  # not a simulated job
    assert demo_jobs.simulated_jobs_name() == 0


def test_the_simulated_job_dies_with_its_gpu_on_xid_79():
    clock = [1_000_000.0]
    client = SimulatedDeviceClient(count=4, scenarios=["xid", "silent", "healthy", "healthy"], hostname="sim-desk-c",
                                   speed=60.0, clock=lambda: clock[0])  # fmt: skip
    assert client.running_jobs([0, 2])[0]  # the first job holds every GPU from the start
    # the XID 79 comes 15 scenario minutes in (15 s at 60x): the job is still named 3 s after it...
    clock[0] += 18
    assert [e.code for e in client.take_xid_events()] == [79]
    assert client.running_jobs([0])[0]
    # ...and gone from GPU 0 once its processes died with the GPU; GPU 2 still runs it
    clock[0] += 5
    jobs = client.running_jobs([0, 2])
    assert jobs[0] == [] and jobs[2]


def test_the_day_of_history_names_its_jobs_and_the_demo_names_their_users(settings, tmp_path):
    """The backfilled readings carry the simulated jobs; the pipeline folds them into spans, and
    the demo's stand-in for Slurm's accounting names their users."""
    from portal.telemetry.pipeline import pipeline_run

    settings.VAR_DIR = tmp_path
    call_command("seed_demo", verbosity=0)
    story.prepare_simulated_hosts()
    assert story.backfill_history(span=dt.timedelta(hours=1))
    while pipeline_run().batches:
        pass
    slurm = Job.objects.filter(scheduler="slurm")
    assert slurm.exists() and JobSpan.objects.filter(job__in=slurm).exists()
    # ids of their own: the live agents' jobs start again from job 0
    assert all(int(key.split(":")[1]) >= story.BACKFILL_JOB_ID_OFFSET for key in slurm.values_list("key", flat=True))
    demo_jobs.simulated_jobs_name()
    assert not slurm.filter(user__isnull=True).exists()
    assert set(Job.objects.values_list("user", flat=True)) <= {"alice", "bob", "chen"}
