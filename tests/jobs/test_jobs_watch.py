"""Beat's jobs work (portal/jobs/services.py): interrupted jobs and GPU-hours lost (and what the
reliability report and the RMA pack say of them), idle allocations, Slurm's names for jobs."""

import datetime as dt
from urllib.parse import quote

import pytest
from django.utils import timezone

from portal.jobs import services
from portal.jobs.models import Job
from portal.maintenance.models import Ticket
from portal.reports.rma import rma_evidence, rma_pdf
from portal.scheduler.adapters import JobInfo, SchedulerUnavailable
from tests.jobs.helpers import STEP, host_for, reading, run, store
from tests.telemetry.batches import gpu_uuid

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
START = NOW - dt.timedelta(hours=3)


@pytest.fixture
def crash():
    """slurm:500 on GPUs 0 and 1 of dgx-x from START; GPU 1 falls off the bus at reading 60 and the
    job leaves both GPUs there; slurm:501 runs on GPU 0 across the fault and goes on (not
    interrupted); user:cy runs idle on GPU 2 for 90 minutes."""
    host = host_for("dgx-x")
    uuids = [gpu_uuid(100 * host.pk + g) for g in range(3)]
    readings = []
    for n in range(200):
        ts = START + n * STEP
        readings.append(reading(uuids[0], ts, (["slurm:500"] if n <= 60 else []) + ["slurm:501"], n))
        if n <= 60:
            readings.append(reading(uuids[1], ts, ["slurm:500"], n))
        if n <= 180:
            readings.append(reading(uuids[2], ts, ["user:cy"], n, utilization_gpu_pct=2))
    store(host, readings, now=NOW, gpus=3)
    run()
    gpu1 = host.gpus.get(index=1)
    at = START + 60 * STEP + dt.timedelta(seconds=5)
    ticket = Ticket.objects.create(fingerprint="bus", rule="xid_bus", host=host, gpu=gpu1, title="fell off the bus",
                                   severity="critical", first_seen=at, last_seen=at)  # fmt: skip
    return {"host": host, "ticket": ticket, "at": at, "gpu1": gpu1}


def test_a_critical_fault_interrupts_the_jobs_that_left_its_gpu(crash, viewer, client_for):
    assert services.job_interruptions_assess(now=NOW) == 1
    assert services.job_interruptions_assess(now=NOW) == 1  # again: the same answer, nothing doubled
    job = Job.objects.get(key="slurm:500")
    # its GPU-hours from its start to the ticket: two GPUs for 60 readings (30 minutes each)
    assert job.interrupted and job.interrupted_by == crash["ticket"]
    assert job.gpu_hours_lost == pytest.approx(2 * 60 * 30 / 3600)
    assert not Job.objects.get(key="slurm:501").interrupted
    answer = client_for(viewer).get("/api/v1/jobs/" + quote("slurm:500", safe="")).json()
    assert answer["interrupted"] is True and answer["gpu_hours_lost"] == pytest.approx(1.0)
    assert [t["id"] for t in answer["tickets"]] == [crash["ticket"].pk]
    listed = client_for(viewer).get("/api/v1/jobs", {"interrupted": "true"}).json()
    assert [j["job"] for j in listed] == ["slurm:500"]
    page = client_for(viewer).get("/jobs/" + quote("slurm:500", safe="") + "/").content.decode()
    assert crash["ticket"].get_absolute_url() in page


def test_a_fault_too_recent_to_tell_interrupts_nothing_yet(crash):
    assert services.job_interruptions_assess(now=crash["at"] + dt.timedelta(minutes=5)) == 0


def test_the_reliability_report_and_the_rma_pack_count_the_lost_hours(crash, admin, client_for):
    services.job_interruptions_assess(now=NOW)
    report = client_for(admin).get(
        "/api/v1/reports/reliability",
        # to the wall clock's now: the GPUs were registered when the test ran, minutes after NOW
        # was taken at collection
        {
            "from": (NOW - dt.timedelta(days=1)).isoformat(),
            "to": (timezone.now() + dt.timedelta(minutes=1)).isoformat(),
        },
    )
    assert report.status_code == 200, report.content
    body = report.json()
    assert body["fleet"]["gpu_hours_lost"] == pytest.approx(1.0)
    lost = {row["category"]: row["gpu_hours_lost"] for row in body["failure_rates"]["categories"]}
    assert lost["interconnect"] == pytest.approx(1.0) and sum(lost.values()) == pytest.approx(1.0)
    assert body["failure_rates"]["all"]["gpu_hours_lost"] == pytest.approx(1.0)
    evidence = rma_evidence(gpu=crash["gpu1"], now=NOW)
    assert [(j["job"], j["ticket"], j["gpu_hours_lost"]) for j in evidence["interrupted_jobs"]] == [
        ("slurm:500", crash["ticket"].pk, 1.0)
    ]
    assert rma_pdf(evidence).startswith(b"%PDF")


def test_an_idle_job_opens_one_info_ticket_naming_job_and_user(crash):
    cy = Job.objects.get(key="user:cy")
    assert cy.idle and not Job.objects.get(key="slurm:501").idle
    assert services.jobs_idle_flag(now=NOW) == 1
    assert services.jobs_idle_flag(now=NOW) == 0  # once per job
    ticket = Ticket.objects.get(rule="idle_allocation")
    assert ticket.severity == "info" and ticket.gpu.index == 2
    note = ticket.events.get().note_shown
    assert "user:cy" in note and "cy" in note and "1.5" in note
    assert Job.objects.get(key="user:cy").idle_ticket == ticket


class _Slurm:
    """The scheduler's adapter as a test stands it in: Slurm's answers by job id."""

    timeout = 1.0

    def __init__(self, answers=None, down=False):
        self.answers, self.down, self.asked = answers or {}, down, []

    def job_info(self, job_id):
        self.asked.append(job_id)
        if self.down:
            raise SchedulerUnavailable("scontrol did not answer within 1 s")
        return self.answers.get(job_id)


def test_slurm_names_each_job_once_and_slurm_down_changes_nothing(crash, settings, monkeypatch, viewer, client_for):
    from portal.jobs import services as jobs_services

    settings.SLURM_ENABLED = True
    down = _Slurm(down=True)
    monkeypatch.setattr(jobs_services, "scheduler_adapter", lambda: down)
    assert services.jobs_slurm_lookup(now=NOW) == 0
    assert Job.objects.filter(lookup_tries=0, lookup="pending").count() == Job.objects.filter(scheduler="slurm").count()
    assert down.asked == [500]  # a silent Slurm stops the pass: no try counted, 501 not asked
    assert client_for(viewer).get("/jobs/").status_code == 200  # Slurm down never fails a page
    slurm = _Slurm({500: JobInfo(user="dora", name="<train>", account="vision")})
    monkeypatch.setattr(jobs_services, "scheduler_adapter", lambda: slurm)
    assert services.jobs_slurm_lookup(now=NOW) == 1
    assert services.jobs_slurm_lookup(now=NOW) == 0
    job = Job.objects.get(key="slurm:500")
    assert (job.user, job.name, job.account, job.lookup) == ("dora", "<train>", "vision", "done")
    assert sorted(slurm.asked) == [500, 501, 501]  # 500 once; 501 unknown, asked again until it gives up
    answer = client_for(viewer).get("/api/v1/jobs", {"user": "dora"}).json()
    assert [(j["job"], j["name"], j["account"]) for j in answer] == [("slurm:500", "<train>", "vision")]
    assert "&lt;train&gt;" in client_for(viewer).get("/jobs/").content.decode()
    for _ in range(5):
        services.jobs_slurm_lookup(now=NOW)
    assert Job.objects.get(key="slurm:501").lookup == "gave_up"
