"""Slurm's user, name and account of a job, from the real test cluster: the cli adapter's
`job_info` while the job runs and after it ends, and beat's `jobs_slurm_lookup` end to end. The
cluster keeps no accounting (sacct answers with an error), which is what a job Slurm no longer
knows looks like there: it must count a try, not stop the pass as a silent Slurm does."""

from __future__ import annotations

import getpass
import time

import pytest
from django.utils import timezone

from portal.jobs import services
from portal.jobs.models import Job
from portal.scheduler.adapters import JobInfo, SlurmCli, SlurmRest

pytestmark = pytest.mark.django_db

NEVER_SUBMITTED = 4_000_000  # far above any id the session's cluster hands out


def _job_row(job_id: int) -> Job:
    now = timezone.now()
    return Job.objects.create(key=f"slurm:{job_id}", scheduler=Job.Scheduler.SLURM, started_at=now, ended_at=now)


def _wait_gone_from_queue(cluster, job_id: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%T").strip() == "":
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not end")


def test_job_info_while_the_job_runs_and_after_it_ends(cluster):
    job_id = cluster.sbatch("--job-name=<train> resnet", "--account=vision", "--wrap=sleep 60")
    cluster.wait_running(job_id)
    expected = JobInfo(user=getpass.getuser(), name="<train> resnet", account="vision")
    assert SlurmCli().job_info(job_id) == expected
    cluster.run("scancel", str(job_id))
    _wait_gone_from_queue(cluster, job_id)
    assert SlurmCli().job_info(job_id) == expected  # slurmctld still holds it (MinJobAge)
    assert SlurmCli().job_info(NEVER_SUBMITTED) is None  # scontrol: Invalid job id; sacct: accounting off


def test_beat_names_a_real_job_and_gives_up_on_one_slurm_never_knew(cluster, settings):
    settings.SLURM_ENABLED, settings.SLURM_MODE, settings.SLURM_BIN_DIR = True, "cli", ""
    job_id = cluster.sbatch("--job-name=eval", "--account=vision", "--wrap=sleep 60")
    cluster.wait_running(job_id)
    unknown, real = _job_row(NEVER_SUBMITTED), _job_row(job_id)  # the unknown job queued first
    assert services.jobs_slurm_lookup() == 1
    real.refresh_from_db()
    assert (real.user, real.name, real.account, real.lookup) == (getpass.getuser(), "eval", "vision", "done")
    unknown.refresh_from_db()
    assert (unknown.lookup, unknown.lookup_tries) == ("pending", 1)
    for _ in range(services.LOOKUP_TRIES - 1):
        services.jobs_slurm_lookup()
    unknown.refresh_from_db()
    assert (unknown.lookup, unknown.lookup_tries, unknown.user) == ("gave_up", services.LOOKUP_TRIES, None)


def test_the_rest_adapter_names_a_real_job_and_not_one_slurm_never_knew(cluster):
    """22.05's slurmrestd: a running job from slurmctld; an unknown one is a 500 "Invalid job id
    specified", and the slurmdb path a 404 (no slurmdbd plugin here): not known, not Slurm down."""
    job_id = cluster.sbatch("--job-name=rest <eval>", "--account=vision", "--wrap=sleep 60")
    cluster.wait_running(job_id)
    rest = SlurmRest(url=cluster.rest_url, user=cluster.rest_user, token=cluster.rest_token)
    assert rest.job_info(job_id) == JobInfo(user=getpass.getuser(), name="rest <eval>", account="vision")
    assert rest.job_info(NEVER_SUBMITTED) is None
