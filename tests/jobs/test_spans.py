"""The span stage (portal/jobs/spans.py): readings' jobs folded into spans, as portal-api-v1.md
"Jobs on GPUs" defines them, whatever order the readings arrive in."""

import datetime as dt
import random

import pytest
from django.utils import timezone

from portal.jobs.models import Job, JobSpan
from portal.jobs.spans import SPAN_FIELDS
from portal.telemetry.services.retention import telemetry_prune
from tests.jobs.helpers import STEP, host_for, reading, run, spans, store
from tests.telemetry.batches import gpu_uuid

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
START = NOW - dt.timedelta(hours=3)


def _scenario(uuid: str) -> list[dict]:
    """Job slurm:7 for 40 readings, away 4 minutes (same span) then 30 more; then away 10 minutes
    (a new span) for 20; user:ana beside it from reading 10 to 30; a reading without `jobs`."""
    out = []
    for n in range(100):
        ts = START + n * STEP
        jobs = []
        if n < 40 or 48 <= n < 78 or n >= 98:
            jobs.append("slurm:7")
        if 10 <= n < 30:
            jobs.append("user:ana")
        out.append(reading(uuid, ts, None if n == 5 else jobs, n))
    out += [reading(uuid, START + 100 * STEP + dt.timedelta(minutes=11) + k * STEP, ["slurm:7"], 200 + k)
            for k in range(20)]  # fmt: skip
    return out


def _in_batches(host, readings: list[dict], size: int) -> None:
    for first in range(0, len(readings), size):
        store(host, readings[first : first + size], now=NOW)
        run()


def test_in_order_spans_and_their_figures():
    host = host_for("dgx-span")
    uuid = gpu_uuid(100 * host.pk)
    _in_batches(host, _scenario(uuid), 25)
    slurm = list(JobSpan.objects.filter(job__key="slurm:7").order_by("started_at"))
    # 0..39 and 48..77 are one span (4.5 minutes away; reading 5 cannot tell); 98..99 a second
    # (10.5 minutes away); the 20 readings 11 minutes later a third.
    assert [(s.started_at, s.ended_at, s.readings) for s in slurm] == [
        (START, START + 77 * STEP, 69),
        (START + 98 * STEP, START + 99 * STEP, 2),
        (START + 100 * STEP + dt.timedelta(minutes=11), START + 119 * STEP + dt.timedelta(minutes=11), 20),
    ]
    first = slurm[0]
    ns = [n for n in [*range(40), *range(48, 78)] if n != 5]
    assert first.gpu_hours == pytest.approx(77 * 30 / 3600)
    assert first.utilization_gpu_mean_pct == pytest.approx(sum(50 + n % 50 for n in ns) / 69)
    assert first.memory_used_max_mib == 1077 and first.temperature_max_c == 69
    assert first.throttled_pct == pytest.approx(100 * sum(1 for n in ns if n % 7 == 0) / 69)
    # energy: the counter's increases between the span's readings (77 steps of 45,000 mJ)
    assert first.energy_kwh == pytest.approx(77 * 45_000 / 3.6e9)
    (ana,) = JobSpan.objects.filter(job__key="user:ana")
    assert (ana.started_at, ana.ended_at, ana.readings) == (START + 10 * STEP, START + 29 * STEP, 20)
    job = Job.objects.get(key="user:ana")
    assert (job.scheduler, job.user, job.lookup) == ("user", "ana", "done")
    slurm_job = Job.objects.get(key="slurm:7")
    assert (slurm_job.scheduler, slurm_job.user, slurm_job.lookup) == ("slurm", None, "pending")
    assert slurm_job.started_at == START and slurm_job.gpu_hours == pytest.approx(sum(s.gpu_hours for s in slurm))


def test_late_shuffled_and_resent_readings_give_the_same_spans():
    host = host_for("dgx-span")
    uuid = gpu_uuid(100 * host.pk)
    readings = _scenario(uuid)
    _in_batches(host, readings, 25)
    expected = spans()
    JobSpan.objects.all().delete()
    Job.objects.all().delete()
    other = host_for("dgx-late")
    other_uuid = gpu_uuid(100 * other.pk)
    shuffled = _scenario(other_uuid)
    random.Random(45).shuffle(shuffled)
    _in_batches(other, shuffled, 13)
    # a batch with readings already stored (another batch_id): nothing changes
    store(other, shuffled[:30], now=NOW)
    run()
    assert spans() == [(key, other_uuid, *rest) for key, _, *rest in expected]
    assert len(expected) == 4


def test_a_late_reading_bridges_two_spans_and_the_job_figures_follow():
    host = host_for("dgx-bridge")
    uuid = gpu_uuid(100 * host.pk)
    early = [reading(uuid, START + n * STEP, ["k8s:lab/train-0"], n) for n in range(10)]
    later = [reading(uuid, START + n * STEP, ["k8s:lab/train-0"], n) for n in range(22, 32)]
    store(host, early + later, now=NOW)
    run()
    assert JobSpan.objects.count() == 2  # 9 -> 22: 6.5 minutes away
    store(host, [reading(uuid, START + 15 * STEP, ["k8s:lab/train-0"], 15)], now=NOW)  # 3 and 3.5 minutes
    run()
    (span,) = JobSpan.objects.all()
    assert (span.started_at, span.ended_at, span.readings) == (START, START + 31 * STEP, 21)
    job = Job.objects.get()
    assert (job.scheduler, job.user, job.gpu_hours) == ("k8s", None, pytest.approx(31 * 30 / 3600))


def test_spans_outlive_the_raw_readings(settings):
    host = host_for("dgx-old")
    uuid = gpu_uuid(100 * host.pk)
    store(host, [reading(uuid, START + n * STEP, ["slurm:9"], n) for n in range(20)], now=NOW)
    run()
    before = spans()
    settings.RETENTION_RAW_DAYS = 0
    telemetry_prune(now=NOW + dt.timedelta(days=3))
    assert spans() == before and Job.objects.get(key="slurm:9").gpu_hours > 0


@pytest.mark.postgres
def test_a_late_reading_into_a_compressed_day_gives_the_spans_of_in_order_delivery(require_postgres):
    from portal.telemetry.services import compression

    old = NOW - dt.timedelta(days=2)
    host = host_for("dgx-cold")
    uuid = gpu_uuid(100 * host.pk)
    every = [reading(uuid, old + n * STEP, ["slurm:11"], n) for n in range(60)]
    store(host, every[:20] + every[21:40] + every[52:], now=NOW)
    run()
    assert compression.readings_compress(now=NOW)["readings"] == 47
    store(host, every[40:52] + every[20:21], now=NOW)  # into compressed hours
    run()
    in_order = host_for("dgx-warm")
    store(in_order, [reading(gpu_uuid(100 * in_order.pk), old + n * STEP, ["slurm:12"], n) for n in range(60)],
          now=NOW)  # fmt: skip
    run()
    cold, warm = (
        list(JobSpan.objects.filter(job__key=key).values_list(*SPAN_FIELDS)) for key in ("slurm:11", "slurm:12")
    )
    assert cold == warm and len(cold) == 1
