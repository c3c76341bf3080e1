"""The span stage (portal/jobs/spans.py): readings' jobs folded into spans, as portal-api-v1.md
"Jobs on GPUs" defines them, whatever order the readings arrive in."""

import datetime as dt
import random

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.jobs.models import Job, JobSpan
from portal.jobs.spans import JOB_FIGURES, SPAN_FIELDS, job_figures_refresh
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


def _job_figures() -> dict[str, tuple]:
    return {key: tuple(figures) for key, *figures in Job.objects.values_list("key", *JOB_FIGURES)}


def _approx(figures: dict[str, tuple]) -> dict:
    return {key: tuple(pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for v in row)
            for key, row in figures.items()}  # fmt: skip


def test_job_figures_folded_pass_by_pass_are_those_counted_over_all_spans():
    host = host_for("dgx-fold")
    uuid = gpu_uuid(100 * host.pk)
    shuffled = _scenario(uuid)
    random.Random(7).shuffle(shuffled)  # late readings: spans built again, bridged, split
    _in_batches(host, shuffled, 9)
    folded = _job_figures()
    job_figures_refresh(job_ids=set(Job.objects.values_list("pk", flat=True)))
    assert folded == _approx(_job_figures()) and len(folded) == 2


def test_a_span_no_longer_idle_clears_the_jobs_idle_flag():
    host = host_for("dgx-idle")
    uuid = gpu_uuid(100 * host.pk)
    idle = [reading(uuid, START + n * STEP, ["slurm:13"], n, utilization_gpu_pct=1) for n in range(130)]
    _in_batches(host, idle, 65)
    assert Job.objects.get(key="slurm:13").idle  # 64.5 minutes under 5 %
    busy = [reading(uuid, START + n * STEP, ["slurm:13"], n, utilization_gpu_pct=100) for n in range(130, 140)]
    store(host, busy, now=NOW)
    run()
    assert not Job.objects.get(key="slurm:13").idle  # mean 8 %: the span is no longer idle


def _pass_cost(host, uuid: str, n: int) -> tuple[int, int, int]:
    """One pass over one more batch of the job: its queries, the span rows it read into models, and
    the job rows its queries wrote, counted by the database driver."""
    spans_loaded = []

    def count(sender, instance, **kwargs):
        spans_loaded.append(instance)

    touched = []

    def rows(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        cursor = context["cursor"]
        if "jobs_" in sql:  # the rollups' rows follow where the minutes fall, not the job
            touched.append(max(cursor.rowcount, 0))
        return result

    store(host, [reading(uuid, LONG_START + (n + k) * STEP, ["slurm:21"], n + k) for k in range(4)], now=NOW)
    post_init.connect(count, sender=JobSpan)
    try:
        with CaptureQueriesContext(connection) as queries, connection.execute_wrapper(rows):
            run()
    finally:
        post_init.disconnect(count, sender=JobSpan)
    return len(queries), len(spans_loaded), sum(touched)


LONG_START = NOW - dt.timedelta(hours=6)


def test_a_long_jobs_pass_costs_the_same_whatever_its_history():
    """The job's figures are moved by the pass's spans alone: a job with 3 spans behind it and one
    with 30 cost a pass the same queries, span rows read and rows touched."""
    costs = {}
    for history in (3, 30):
        JobSpan.objects.all().delete()
        Job.objects.all().delete()
        host = host_for(f"dgx-long-{history}")
        uuid = gpu_uuid(100 * host.pk)
        # 4 readings every 15 (6 minutes from the last of one to the first of the next): a span each
        steps = [15 * s + k for s in range(history) for k in range(4)]
        store(host, [reading(uuid, LONG_START + n * STEP, ["slurm:21"], n) for n in steps], now=NOW)
        run()
        assert JobSpan.objects.count() == history
        costs[history] = _pass_cost(host, uuid, steps[-1] + 1)  # continues the last span
        assert JobSpan.objects.count() == history
        job = Job.objects.get(key="slurm:21")
        assert job.gpu_hours == pytest.approx(((history - 1) * 3 + 7) * 30 / 3600)
    assert costs[3] == costs[30], costs


def test_one_run_taken_column_by_column_is_the_fold_reading_by_reading():
    from portal.jobs.spans import Fold, one_run

    rng = random.Random(3)
    for _ in range(200):
        rows, ts = [], START
        for _ in range(rng.randrange(1, 40)):
            ts += dt.timedelta(seconds=rng.choice([1, 10, 30, 299]))
            pick = lambda value: None if rng.random() < 0.2 else value  # noqa: E731
            rows.append((ts, 3, pick(rng.randrange(101)), pick(rng.randrange(80000)), pick(rng.randrange(20, 95)),
                         pick(rng.choice([0, 1, 8, 64, 256])), pick(rng.uniform(0, 1e9))))  # fmt: skip
        expected = Fold(started_at=rows[0][0], ended_at=rows[0][0])
        for row in rows:
            expected.add(row)
        assert one_run(rows) == (3, expected)
    assert one_run([(START, 3, 1, 1, 1, 0, 1.0), (START, 3, 1, 1, 1, 0, 1.0)]) is None  # one instant twice
    assert one_run([(START, 3, 1, 1, 1, 0, 1.0), (START + dt.timedelta(minutes=6), 3, 1, 1, 1, 0, 1.0)]) is None
    assert one_run([(START, 3, 1, 1, 1, 0, 1.0), (START + STEP, 4, 1, 1, 1, 0, 1.0)]) is None
