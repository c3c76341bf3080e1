"""The jobs API (portal-api-v1.md, "Jobs on GPUs"): a GPU's jobs, the job list and its filters,
one job; permissions and bad input."""

import datetime as dt
from urllib.parse import quote

import pytest
from django.utils import timezone

from portal.jobs.models import Job
from portal.maintenance.models import Ticket
from tests.jobs.helpers import STEP, host_for, reading, run, store
from tests.telemetry.batches import gpu_uuid

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
START = NOW - dt.timedelta(hours=2)


@pytest.fixture
def lab():
    """dgx-a: GPU 0 runs slurm:100 (busy) then user:ana idle for 70 minutes; GPU 1 runs slurm:100
    too and k8s:lab/eval-1. dgx-b: slurm:200, still running (its latest reading names it)."""
    a, b = host_for("dgx-a"), host_for("dgx-b")
    ua0, ua1, ub0 = gpu_uuid(100 * a.pk), gpu_uuid(100 * a.pk + 1), gpu_uuid(100 * b.pk)
    readings = []
    for n in range(200):
        ts = START + n * STEP
        if n < 40:
            readings.append(reading(ua0, ts, ["slurm:100"], n))
        elif n <= 180:
            readings.append(reading(ua0, ts, ["user:ana"], n, utilization_gpu_pct=1))
        readings.append(reading(ua1, ts, ["slurm:100", "k8s:lab/eval-1"] if n < 40 else [], n))
    store(a, readings, now=NOW, gpus=2)
    store(b, [reading(ub0, NOW - k * STEP, ["slurm:200"], k) for k in range(20)], now=NOW)
    run()
    return {"a": a, "b": b, "ua0": ua0, "ua1": ua1, "ub0": ub0}


def test_a_gpus_jobs_newest_first_with_their_figures(lab, viewer, client_for):
    answer = client_for(viewer).get(f"/api/v1/gpus/{lab['ua0']}/jobs")
    assert answer.status_code == 200, answer.content
    spans = answer.json()
    assert [span["job"] for span in spans] == ["user:ana", "slurm:100"]
    ana = spans[0]
    assert ana["gpu"] == lab["ua0"] and ana["host"] == "dgx-a" and ana["running"] is True  # the latest reading
    assert ana["utilization_gpu_mean_pct"] == 1.0 and ana["gpu_hours"] == pytest.approx(140 * 30 / 3600, abs=1e-4)
    assert set(ana) == {
        "job", "gpu", "host", "started_at", "ended_at", "running", "gpu_hours", "energy_kwh",
        "utilization_gpu_mean_pct", "memory_used_max_mib", "temperature_max_c", "throttled_pct",
    }  # fmt: skip
    running = client_for(viewer).get(f"/api/v1/gpus/{lab['ub0']}/jobs").json()
    assert running[0]["running"] is True and running[0]["ended_at"].startswith(NOW.strftime("%Y-%m-%dT%H:%M"))
    # a period that ends before slurm:100 began leaves it out
    early = client_for(viewer).get(f"/api/v1/gpus/{lab['ua0']}/jobs", {"to": (START - STEP).isoformat()})
    assert early.json() == []


def test_the_job_list_and_its_filters(lab, viewer, client_for):
    client = client_for(viewer)

    def keys(**params):
        answer = client.get("/api/v1/jobs", params)
        assert answer.status_code == 200, answer.content
        return [job["job"] for job in answer.json()]

    assert set(keys()) == {"slurm:100", "k8s:lab/eval-1", "user:ana", "slurm:200"}
    assert keys(user="ana") == ["user:ana"]
    assert set(keys(host="dgx-a")) == {"slurm:100", "k8s:lab/eval-1", "user:ana"}
    assert keys(idle="true") == ["user:ana"]
    assert "user:ana" not in keys(idle="false")
    assert keys(interrupted="true") == []
    assert keys(**{"from": (NOW - dt.timedelta(minutes=5)).isoformat()}) == ["slurm:200"]
    assert len(keys(limit=1)) == 1


def test_one_job_by_its_url_encoded_key(lab, viewer, client_for):
    answer = client_for(viewer).get("/api/v1/jobs/" + quote("slurm:100", safe=""))
    assert answer.status_code == 200, answer.content
    job = answer.json()
    assert job["scheduler"] == "slurm" and job["user"] is None and job["running"] is False
    assert sorted(span["gpu"] for span in job["gpus"]) == sorted([lab["ua0"], lab["ua1"]])
    assert job["gpu_hours"] == pytest.approx(2 * 39 * 30 / 3600, abs=1e-4)
    assert job["tickets"] == [] and job["interrupted"] is False and job["gpu_hours_lost"] == 0
    pod = client_for(viewer).get("/api/v1/jobs/" + quote("k8s:lab/eval-1", safe=""))
    assert pod.status_code == 200 and pod.json()["scheduler"] == "k8s"
    assert client_for(viewer).get("/api/v1/jobs/" + quote("slurm:999", safe="")).status_code == 404


def test_a_jobs_tickets_are_the_hardware_tickets_opened_on_its_gpus_while_it_ran(lab, viewer, client_for):
    gpu = lab["a"].gpus.get(index=1)
    at = START + 20 * STEP
    Ticket.objects.create(fingerprint="x", rule="xid_hardware", host=lab["a"], gpu=gpu, title="XID 48",
                          severity="critical", first_seen=at, last_seen=at)  # fmt: skip
    Ticket.objects.create(fingerprint="y", rule="schedule_cleaning", host=lab["a"], gpu=gpu, title="Cleaning",
                          severity="info", first_seen=at, last_seen=at)  # fmt: skip
    job = client_for(viewer).get("/api/v1/jobs/" + quote("slurm:100", safe="")).json()
    assert [(t["title"], t["gpu"]) for t in job["tickets"]] == [("XID 48", lab["ua1"])]
    assert client_for(viewer).get("/api/v1/jobs/" + quote("user:ana", safe="")).json()["tickets"] == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-01-02T00:00:00"}, "from"),
        ({"interrupted": "maybe"}, "interrupted"),
        ({"idle": "sometimes"}, "idle"),
        ({"limit": "0"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"user": "u" * 129}, "user"),
        ({"host": "h" * 254}, "host"),
    ],
)
def test_bad_filters_are_a_400_naming_the_field(lab, viewer, client_for, params, field):
    answer = client_for(viewer).get("/api/v1/jobs", params)
    assert answer.status_code == 400, answer.content
    assert field in answer.content.decode()


def test_a_gpus_jobs_bad_input_and_unknown_gpu(lab, viewer, client_for):
    client = client_for(viewer)
    bad = client.get(f"/api/v1/gpus/{lab['ua0']}/jobs", {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"})
    assert bad.status_code == 400 and "from" in bad.content.decode()
    assert client.get(f"/api/v1/gpus/{lab['ua0']}/jobs", {"to": "noon"}).status_code == 400
    assert client.get("/api/v1/gpus/GPU-nope/jobs").status_code == 404


def test_only_people_with_a_role_see_jobs(lab, outsider, client_for):
    assert client_for(None).get("/api/v1/jobs").status_code == 401
    assert client_for(outsider).get("/api/v1/jobs").status_code == 403
    assert client_for(outsider).get("/api/v1/jobs/" + quote("slurm:100", safe="")).status_code == 403
    assert client_for(outsider).get(f"/api/v1/gpus/{lab['ua0']}/jobs").status_code == 403


def test_the_list_runs_a_constant_number_of_queries(lab, viewer, client_for, django_assert_max_num_queries):
    client = client_for(viewer)
    client.get("/api/v1/jobs")
    with django_assert_max_num_queries(9):
        assert len(client.get("/api/v1/jobs").json()) == Job.objects.count()


def test_the_lists_spans_are_the_gpus_spans_figure_for_figure(lab, viewer, client_for):
    """The list is written from rows (selectors.jobs_rows), a GPU's spans from model instances
    (figures.span_out): the same span reads the same in both, running and rounding included."""
    client = client_for(viewer)
    Ticket.objects.create(fingerprint="x", rule="xid_hardware", host=lab["a"], gpu=lab["a"].gpus.get(index=1),
                          title="XID 48", severity="critical", first_seen=START + 20 * STEP,
                          last_seen=START + 20 * STEP)  # fmt: skip
    listed = {job["job"]: job for job in client.get("/api/v1/jobs").json()}
    on_gpus = [
        span for uuid in (lab["ua0"], lab["ua1"], lab["ub0"]) for span in client.get(f"/api/v1/gpus/{uuid}/jobs").json()
    ]
    assert len(on_gpus) == sum(len(job["gpus"]) for job in listed.values()) == 5
    for span in on_gpus:
        assert span in listed[span["job"]]["gpus"]
    assert listed["slurm:200"]["running"] is True and listed["slurm:100"]["running"] is False
    assert [t["title"] for t in listed["slurm:100"]["tickets"]] == ["XID 48"]
    assert listed["k8s:lab/eval-1"]["tickets"] == listed["slurm:100"]["tickets"]  # on GPU 1 then too
    assert listed["user:ana"]["tickets"] == []  # GPU 0 only
    for key, job in listed.items():
        assert client.get("/api/v1/jobs/" + quote(key, safe="")).json() == job
