"""The span stage of the one pipeline: readings' jobs folded into spans (portal-api-v1.md, "Jobs on
GPUs").

A span is one job on one GPU, from the first reading that names the job to the last one; more than
SPAN_GAP between two readings naming it ends the span at the first and starts a new one at the
second. Its figures are sums over the readings naming the job (Fold), so that:

- in order (the usual case: a block's readings of a GPU and job all newer than that job's latest
  span there), the readings are folded onto the latest span from the block alone, or start one;
- late (a reading at or before the end of the job's latest span on the GPU: a batch from an
  agent's spool, or a block reaching back to readings already folded), the job's spans on that
  GPU around the block's readings are built again from the stored readings (telemetry.store, raw
  or compressed alike) and replace the old ones.

Both fold the same readings in time order with the same arithmetic: a late reading, a compressed
day or a batch seen twice gives exactly the spans that in-order delivery gives. A GPU's readings
are folded once per run (consecutive readings naming the same job set, no gap in them longer
than SPAN_GAP), and each run's figures are then merged into the span of every job it names: a
reading naming four jobs costs one fold, not four. The figures are sums of small integers (the
energy counter is NVML's whole millijoules), maxima and counts, so where the runs fall changes
nothing.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections import defaultdict
from dataclasses import dataclass, field, replace

from django.db import connections, models, router
from django.db.models import Q

from portal.jobs.models import SPAN_GAP, Job, JobSpan
from portal.telemetry import metrics, store
from portal.telemetry.columns import READING_ROW_COLUMNS
from portal.telemetry.pipeline import Block, Prepared
from portal.telemetry.selectors import THROTTLE_BIT

# The reading columns a span's figures come from, in this order.
COLUMNS = ("ts", "job_set", *(metric.name for metric in (
    metrics.UTILIZATION_GPU, metrics.MEMORY_USED, metrics.TEMPERATURE, metrics.THROTTLE_REASONS, metrics.ENERGY,
)))  # fmt: skip
# "Throttled" (portal-api-v1.md): the reasons that slow a GPU for heat or power.
THROTTLED_MASK = (
    THROTTLE_BIT["hw_slowdown"]
    | THROTTLE_BIT["hw_thermal"]
    | THROTTLE_BIT["sw_thermal"]
    | THROTTLE_BIT["hw_power_brake"]
)
SPAN_FIELDS = (
    "started_at", "ended_at", "readings", "utilization_sum", "utilization_count", "memory_used_max_mib",
    "temperature_max_c", "throttled_count", "energy_mj", "energy_last_mj",
)  # fmt: skip


@dataclass
class Fold:
    """A span's figures while readings are folded into it, in time order."""

    started_at: dt.datetime
    ended_at: dt.datetime
    readings: int = 0
    utilization_sum: float = 0.0
    utilization_count: int = 0
    memory_used_max_mib: int | None = None
    temperature_max_c: int | None = None
    throttled_count: int = 0
    energy_mj: float | None = None
    energy_last_mj: float | None = None
    pk: int | None = None  # the stored span it continues, if any
    energy_first_mj: float | None = None  # a run's first counter value (merge), never stored

    def add(self, row: tuple) -> None:
        ts, _, utilization, memory, temperature, throttle, energy = row
        self.ended_at = ts
        self.readings += 1
        if utilization is not None:
            self.utilization_sum += utilization
            self.utilization_count += 1
        if memory is not None and (self.memory_used_max_mib is None or memory > self.memory_used_max_mib):
            self.memory_used_max_mib = memory
        if temperature is not None and (self.temperature_max_c is None or temperature > self.temperature_max_c):
            self.temperature_max_c = temperature
        if throttle is not None and throttle & THROTTLED_MASK:
            self.throttled_count += 1
        if energy is not None:
            if self.energy_last_mj is None:
                self.energy_mj = 0.0 if self.energy_mj is None else self.energy_mj
                self.energy_first_mj = energy
            elif energy > self.energy_last_mj:  # a counter that went back (driver reload) adds nothing
                self.energy_mj += energy - self.energy_last_mj
            self.energy_last_mj = energy

    def merge(self, run: Fold) -> None:
        """A later run of readings (within SPAN_GAP of this span's end) folded into this span."""
        self.ended_at = run.ended_at
        self.readings += run.readings
        self.utilization_sum += run.utilization_sum
        self.utilization_count += run.utilization_count
        for name in ("memory_used_max_mib", "temperature_max_c"):
            mine, theirs = getattr(self, name), getattr(run, name)
            if theirs is not None and (mine is None or theirs > mine):
                setattr(self, name, theirs)
        self.throttled_count += run.throttled_count
        if run.energy_mj is not None:
            before = 0.0 if self.energy_mj is None else self.energy_mj
            if self.energy_last_mj is not None and run.energy_first_mj > self.energy_last_mj:
                before += run.energy_first_mj - self.energy_last_mj
            self.energy_mj = before + run.energy_mj
            self.energy_last_mj = run.energy_last_mj

    def copy(self) -> Fold:
        """A new span starting with this run's figures."""
        return replace(self, pk=None)


def runs_of(rows: list[tuple]) -> list[tuple[int | None, Fold]]:
    """A GPU's readings (time order) as runs: (job set, the run's figures)."""
    one = one_run(rows)
    if one is not None:
        return [one]
    runs: list[tuple[int | None, Fold]] = []
    current_set, current = object(), None
    for row in rows:
        if current is None or row[1] != current_set or row[0] - current.ended_at > SPAN_GAP:
            current_set, current = row[1], Fold(started_at=row[0], ended_at=row[0])
            runs.append((current_set, current))
        current.add(row)
    return runs


def one_run(rows: list[tuple]) -> tuple[int | None, Fold] | None:
    """The usual case, a block's readings of a GPU all naming one job set, each after the one
    before by no more than SPAN_GAP: one run, its figures taken column by column with the builtins
    (the same arithmetic in the same order as Fold.add, at a fraction of its cost per reading).
    None where the readings make more than one run or two share an instant."""
    if not rows:
        return None
    ts, sets, utilization, memory, temperature, throttle, energy = zip(*rows, strict=True)
    if sets.count(sets[0]) != len(sets):
        return None
    if len(ts) > 1:
        steps = list(map(operator.sub, ts[1:], ts))
        if max(steps) > SPAN_GAP or min(steps) <= ZERO:
            return None
    used = [value for value in utilization if value is not None]
    fold = Fold(
        started_at=ts[0], ended_at=ts[-1], readings=len(ts), utilization_sum=sum(used, 0.0),
        utilization_count=len(used), memory_used_max_mib=max([v for v in memory if v is not None], default=None),
        temperature_max_c=max([v for v in temperature if v is not None], default=None),
        throttled_count=sum(1 for value in throttle if value is not None and value & THROTTLED_MASK),
    )  # fmt: skip
    counter = [value for value in energy if value is not None]
    if counter:
        # a counter that went back (driver reload) adds nothing, as in Fold.add
        fold.energy_mj = sum([b - a for a, b in zip(counter, counter[1:], strict=False) if b > a], 0.0)
        fold.energy_first_mj, fold.energy_last_mj = counter[0], counter[-1]
    return sets[0], fold


ZERO = dt.timedelta(0)


def fold_runs(runs: list[Fold], spans: list[Fold] | None = None) -> list[Fold]:
    """Fold one job's runs on one GPU (time order, each newer than the spans' last end) onto its
    spans (the last one continued when within SPAN_GAP)."""
    spans = spans if spans is not None else []
    for run in runs:
        if not spans or run.started_at - spans[-1].ended_at > SPAN_GAP:
            spans.append(run.copy())
        else:
            spans[-1].merge(run)
    return spans


def fold_rows(rows: list[tuple], spans: list[Fold] | None = None) -> list[Fold]:
    """Fold one job's readings on one GPU (time order) onto its spans."""
    return fold_runs([run for _, run in runs_of(rows)], spans)


def job_scheduler(key: str) -> str:
    return key.split(":", 1)[0]


@dataclass
class Plan:
    """What the stage writes: new jobs, spans continued or created, spans replaced."""

    new_keys: set[str] = field(default_factory=set)
    written: list[tuple[int, str, Fold]] = field(default_factory=list)  # (gpu_id, key, fold)
    replaced: list[int] = field(default_factory=list)  # span pks built again (deleted first)
    # The stored figures of the spans the plan overwrites (continued or built again), by job key:
    # the job's figures change by what was written less these (job_figures_fold).
    before: list[tuple[str, Fold]] = field(default_factory=list)


def _by_gpu_and_job(block: Block, keys_of: dict[int, tuple[str, ...]]) -> dict[tuple[int, str], list[Fold]]:
    """The block's runs by GPU and job they name."""
    out: dict[tuple[int, str], list[Fold]] = defaultdict(list)
    for gpu_id, rows in block.columns(COLUMNS).items():
        if not any(keys_of.get(job_set) for job_set in {row[1] for row in rows}):
            continue
        one = one_run(rows)
        for job_set, run in [one] if one else runs_of(_once_per_instant(rows)):
            for key in keys_of.get(job_set, ()):
                out[(gpu_id, key)].append(run)
    return out


def _once_per_instant(rows: list[tuple]) -> list[tuple]:
    """A second reading at one instant (two batches overlapping) counts once, as it is stored."""
    out, previous = [], None
    for row in rows:
        if row[0] != previous:
            out.append(row)
            previous = row[0]
    return out


_JOB_SET = READING_ROW_COLUMNS.index("job_set")


def spans_prepare(block: Block) -> Prepared:
    """The span stage (telemetry.pipeline): reads and plans; apply() writes. A block whose readings
    name no job costs a pass over its rows and nothing else."""
    ids = {row[_JOB_SET] for rows in block.readings.values() for row in rows}
    ids.discard(None)
    keys_of = store.job_set_keys(ids)
    grouped = _by_gpu_and_job(block, keys_of) if any(keys_of.values()) else {}
    if not grouped:
        return Prepared(apply=lambda: None)
    jobs = dict(Job.objects.filter(key__in={key for _, key in grouped}).values_list("key", "pk"))
    oldest = min(runs[0].started_at for runs in grouped.values())
    recent: dict[tuple[int, str], list[Fold]] = defaultdict(list)
    if jobs:
        key_of = {pk: key for key, pk in jobs.items()}
        query = (
            JobSpan.objects.filter(
                gpu_id__in={gpu_id for gpu_id, _ in grouped}, job_id__in=jobs.values(), ended_at__gte=oldest - SPAN_GAP
            )
            .order_by("started_at")
            .values_list("pk", "gpu_id", "job_id", *SPAN_FIELDS)
        )  # plain rows: models cost as much as the rest of the stage
        for pk, gpu_id, job_id, *figures in query:
            recent[(gpu_id, key_of[job_id])].append(Fold(*figures, pk=pk))
    plan = Plan(new_keys={key for _, key in grouped if key not in jobs})
    for (gpu_id, key), runs in grouped.items():
        spans = recent.get((gpu_id, key), [])
        if spans and runs[0].started_at <= max(span.ended_at for span in spans):
            _plan_rebuild(plan, gpu_id, key, runs, spans, keys_of)
        else:
            continued = [replace(spans[-1])] if spans else []
            plan.before += [(key, spans[-1])] if spans else []
            plan.written += [(gpu_id, key, fold) for fold in fold_runs(runs, continued)]
    return Prepared(apply=lambda: _apply(plan))


def _plan_rebuild(plan: Plan, gpu_id: int, key: str, runs: list[Fold], spans: list[Fold], keys_of: dict) -> None:
    """The job's spans on the GPU around the block's readings, built again from the stored ones."""
    lo, hi = runs[0].started_at - SPAN_GAP, runs[-1].ended_at + SPAN_GAP
    affected = [span for span in spans if span.ended_at >= lo and span.started_at <= hi]
    start = min([lo, *(span.started_at for span in affected)])
    end = max([hi, *(span.ended_at for span in affected)])
    stored = store.readings_of(gpu_ids=[gpu_id], columns=COLUMNS, start=start, end=end, end_closed=True)
    unknown = {row[1] for row in stored} - keys_of.keys()
    if unknown:
        keys_of.update(store.job_set_keys(unknown))
    named = [row for row in _once_per_instant(stored) if key in keys_of.get(row[1], ())]
    plan.replaced += [span.pk for span in affected]
    plan.before += [(key, span) for span in affected]
    plan.written += [(gpu_id, key, fold) for fold in fold_rows(named)]


def _apply(plan: Plan) -> None:
    if plan.new_keys:
        first = {}
        for _, key, fold in plan.written:
            if key in plan.new_keys and (key not in first or fold.started_at < first[key]):
                first[key] = fold.started_at
        Job.objects.bulk_create([_new_job(key, first[key]) for key in sorted(plan.new_keys)], ignore_conflicts=True)
    jobs = {
        key: (pk, figures)
        for key, pk, *figures in Job.objects.filter(key__in={key for _, key, _ in plan.written}).values_list(
            "key", "pk", *JOB_FIGURES
        )
    }  # fmt: skip
    if plan.replaced:
        JobSpan.objects.filter(pk__in=plan.replaced).delete()
    replaced = set(plan.replaced)
    updates, creates = [], []
    for gpu_id, key, fold in plan.written:
        if fold.pk is not None and fold.pk not in replaced:
            updates.append((fold.pk, fold))
        else:
            values = {name: getattr(fold, name) for name in SPAN_FIELDS}
            creates.append(JobSpan(job_id=jobs[key][0], gpu_id=gpu_id, **values))
    _rows_update(JobSpan, SPAN_FIELDS, [(pk, [getattr(fold, name) for name in SPAN_FIELDS]) for pk, fold in updates])
    if creates:
        JobSpan.objects.bulk_create(creates, batch_size=500)
    figures, unsure = job_figures_fold(plan=plan, jobs=jobs)
    _rows_update(Job, JOB_FIGURES, figures)
    job_figures_refresh(job_ids=unsure)


def _rows_update(model, names: tuple[str, ...], rows: list[tuple[int, list]]) -> None:
    """Rows' fields set by primary key with one prepared UPDATE run over them all. Django's
    bulk_update builds a CASE per field and row, which cost the stage ~100 µs of CPU per span (10
    times the folding itself) where spans are continued on every pass. The values are the fields'
    own: floats, integers, booleans and None as they are, datetimes adapted by the database's
    operations (once looked up: each field's get_db_prep_value costs as much as the write)."""
    if not rows:
        return
    fields = [model._meta.get_field(name) for name in names]
    database = connections[router.db_for_write(model)]
    adapt = database.ops.adapt_datetimefield_value
    moments = [n for n, f in enumerate(fields) if isinstance(f, models.DateTimeField)]
    quote = database.ops.quote_name
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    sql = f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {quote(model._meta.pk.column)} = %s"
    params = []
    for pk, values in rows:
        values = list(values)
        for n in moments:
            values[n] = adapt(values[n])
        values.append(pk)
        params.append(values)
    with database.cursor() as cursor:
        cursor.executemany(sql, params)


def _new_job(key: str, first: dt.datetime) -> Job:
    scheduler = job_scheduler(key)
    user = key.split(":", 1)[1] if scheduler == Job.Scheduler.USER else None
    lookup = Job.Lookup.PENDING if scheduler == Job.Scheduler.SLURM else Job.Lookup.DONE
    return Job(key=key, scheduler=scheduler, user=user, lookup=lookup, started_at=first, ended_at=first)


IDLE_HOURS = 1.0  # a job holding a GPU this long ...
IDLE_UTILIZATION_PCT = 5.0  # ... under this mean utilisation is idle (portal-api-v1.md)


def span_idle(span) -> bool:
    """A span of at least IDLE_HOURS whose mean utilisation is under IDLE_UTILIZATION_PCT."""
    hours = (span.ended_at - span.started_at).total_seconds() / 3600.0
    mean = span.utilization_sum / span.utilization_count if span.utilization_count else None
    return hours >= IDLE_HOURS and mean is not None and mean < IDLE_UTILIZATION_PCT


# A job's figures over its spans, kept by the span stage (job_figures_fold) in this order.
JOB_FIGURES = ("started_at", "ended_at", "gpu_hours", "energy_mj", "utilization_sum", "utilization_count", "idle")


def _hours(fold: Fold) -> float:
    return (fold.ended_at - fold.started_at).total_seconds() / 3600.0


def job_figures_fold(*, plan: Plan, jobs: dict[str, tuple[int, list]]) -> tuple[list[tuple[int, list]], set[int]]:
    """Each job's figures (JOB_FIGURES, as `jobs` holds them: {key: (pk, figures)}) moved by the
    plan's spans alone: what was written less what those spans held before. A pass costs the spans
    it touched, however long the job's history. Returns the rows to write and the jobs whose idle
    flag this cannot tell (a span that was idle no longer is: another may still be), which
    job_figures_refresh recounts."""
    written: dict[str, list[Fold]] = defaultdict(list)
    for _, key, fold in plan.written:
        written[key].append(fold)
    before: dict[str, list[Fold]] = defaultdict(list)
    for key, fold in plan.before:
        before[key].append(fold)
    rows, unsure = [], set()
    for key, folds in written.items():
        pk, (started, ended, hours, energy, utilization_sum, utilization_count, idle) = jobs[key]
        old = before.get(key, [])
        new_energy = [fold.energy_mj for fold in folds if fold.energy_mj is not None]
        if new_energy:
            energy = (energy or 0.0) + sum(new_energy) - sum(f.energy_mj for f in old if f.energy_mj is not None)
        if any(map(span_idle, folds)):
            idle = True
        elif idle and any(map(span_idle, old)):
            unsure.add(pk)
        rows.append((pk, [
            min(started, *(fold.started_at for fold in folds)), max(ended, *(fold.ended_at for fold in folds)),
            hours + sum(map(_hours, folds)) - sum(map(_hours, old)), energy,
            utilization_sum + sum(f.utilization_sum for f in folds) - sum(f.utilization_sum for f in old),
            utilization_count + sum(f.utilization_count for f in folds) - sum(f.utilization_count for f in old),
            idle,
        ]))  # fmt: skip
    return rows, unsure


def job_figures_refresh(*, job_ids: set[int]) -> None:
    """Each job's figures recounted over all its spans (start, end, GPU-hours, energy, utilisation,
    idle): for the demo's seeded jobs and the rare job job_figures_fold cannot tell."""
    if not job_ids:
        return
    spans: dict[int, list[JobSpan]] = defaultdict(list)
    for span in JobSpan.objects.filter(job_id__in=job_ids).only("job_id", *SPAN_FIELDS):
        spans[span.job_id].append(span)
    jobs = []
    for job_id, its in spans.items():
        energies = [span.energy_mj for span in its if span.energy_mj is not None]
        jobs.append(Job(
            pk=job_id, started_at=min(span.started_at for span in its), ended_at=max(span.ended_at for span in its),
            gpu_hours=sum(span.gpu_hours for span in its), energy_mj=sum(energies) if energies else None,
            utilization_sum=sum(span.utilization_sum for span in its),
            utilization_count=sum(span.utilization_count for span in its), idle=any(map(span_idle, its)),
        ))  # fmt: skip
    Job.objects.bulk_update(jobs, JOB_FIGURES, batch_size=500)


def spans_overlapping(*, gpu_ids: list[int], start: dt.datetime, end: dt.datetime) -> Q:
    """Spans on these GPUs overlapping [start, end]."""
    return Q(gpu_id__in=gpu_ids, started_at__lte=end, ended_at__gte=start)
