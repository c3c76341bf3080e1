"""The usage report (portal-api-v1.md, "Jobs on GPUs"): what the GPUs did for whom over a period.

Read from the job spans (portal.jobs) and the reliability report's service hours, never from raw
readings: a constant number of queries whatever the fleet's size or the period's length (the listed
GPUs, their status history, their retirements, the spans, their jobs, the interruptions, the
failures).

Definitions, for the half-open period [from, to) and the GPUs the reliability report lists (the
same `host` and `model` filters):
- a span counts by its part inside the period (`started_at` to `ended_at`, clipped); its energy
  and idle hours in the same proportion;
- `gpu_hours_available`: the listed GPUs' service hours (reliability report: in service, less the
  hours out for repair); `gpu_hours_busy`: the hours each GPU had at least one job span (two jobs
  on one GPU at once count once); `busy_pct` = busy / available × 100;
- per user and per account: `jobs` (jobs with a span in the period), `gpu_hours` (their spans'
  hours: two jobs sharing a GPU count twice, once each), `utilization_gpu_mean_pct` (weighted by
  hours), `idle_gpu_hours` (the hours of spans that held a GPU at least an hour under the idle
  threshold, as the jobs' idle rule says), `energy_kwh` (null when none of the spans had an energy
  counter), `interrupted_jobs` and `gpu_hours_lost` (jobs whose interrupting fault fell in the
  period);
- per model: `gpu_hours_busy` as above; `energy_kwh_per_gpu_hour` = the spans' energy over the
  hours of the spans that have it (null without any); `failures_per_gpu_year` = the reliability
  report's failures on the model's GPUs per GPU-year of their service hours;
- `days`: busy share per UTC day (the page's chart; the day's available hours from the same
  service intervals);
- `flat_out`: GPUs that ran one job or back-to-back jobs flat out for longer than the rest
  policy in the period, as portal.jobs' `flat_out_stretches` finds them (the GPU page's panel).
The queries: 9 (4 more, and only when some GPU ran flat out past the policy).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import ClassVar

from django.db.models import F
from django.db.models.expressions import RawSQL
from django.db.models.functions import NullIf
from django.utils.translation import gettext

from portal.core import engine
from portal.jobs import selectors as jobs_selectors
from portal.jobs.selectors import flat_out_stretches
from portal.jobs.spans import IDLE_HOURS, IDLE_UTILIZATION_PCT
from portal.maintenance.services.config import RuleParams
from portal.reports.baselines import HOURS_PER_YEAR
from portal.reports.failures import failures_of
from portal.reports.selectors import (
    HOUR,
    ReportQuery,
    gpu_start,
    json_rounded,
    listed_gpus,
    out_for_repair_intervals,
    retired_at_of,
    retired_times_of,
    status_changes_of,
)

MAX_PERIOD = dt.timedelta(days=731)
DAY = dt.timedelta(days=1)
DAY_S = 86400.0
KWH_MJ = 3.6e9  # millijoules in a kilowatt-hour
USER_FIELDS = ("jobs", "gpu_hours", "utilization_gpu_mean_pct", "idle_gpu_hours", "energy_kwh", "interrupted_jobs",
               "gpu_hours_lost")  # fmt: skip
FLEET_FIELDS = ("gpus", "gpu_hours_available", "gpu_hours_busy", "busy_pct", "energy_kwh", "gpu_hours_lost")
MODEL_FIELDS = ("model", "gpus", "gpu_hours_busy", "energy_kwh_per_gpu_hour", "failures_per_gpu_year")
FLAT_OUT_FIELDS = ("gpu", "host", "index", "model", "started_at", "ended_at", "hours", "jobs", "users")

# The jobs' idle rule ("held a GPU for at least 1 hour with a mean utilisation under 5 %"),
# applied to each span for the idle GPU-hours: portal.jobs.spans' IDLE_HOURS and IDLE_UTILIZATION_PCT.
NO_REST_RULE = "no_rest"  # its settings in force are the fleet's rest policy


@dataclass(frozen=True)
class RestPolicy:
    """The fleet's rest policy: the "no rest" rule's settings in force for the fleet."""

    hours: float
    busy_pct: float
    gap_s: float


def _spans_query(gpu_ids, start: dt.datetime, end: dt.datetime):
    return jobs_selectors.spans().filter(gpu_id__in=gpu_ids, ended_at__gte=start, started_at__lt=end).order_by()


def usage_spans(*, gpu_ids, start: dt.datetime, end: dt.datetime) -> list[tuple]:
    """The spans on these GPUs overlapping [start, end), one query: (gpu id, job id, start and end
    in seconds since the epoch, mean utilisation or None, kWh or None). Numbers only, worked out by
    the database: a month of a thousand GPUs is some 150,000 spans, and PostgreSQL turns them into
    seconds faster than Python parses timestamps (portal.core.engine)."""
    spans = _spans_query(gpu_ids, start, end).annotate(
        util=F("utilization_sum") / NullIf(F("utilization_count"), 0), kwh=F("energy_mj") / KWH_MJ
    )
    started_sql, ended_sql = (engine.epoch_seconds_sql(f'"jobs_jobspan"."{c}"') for c in ("started_at", "ended_at"))
    if started_sql is not None:
        spans = spans.annotate(a=RawSQL(started_sql, ()), b=RawSQL(ended_sql, ()))
        return list(spans.values_list("gpu_id", "job_id", "a", "b", "util", "kwh"))
    rows = spans.values_list("gpu_id", "job_id", "started_at", "ended_at", "util", "kwh")
    return [(g, j, a.timestamp(), b.timestamp(), util, kwh) for g, j, a, b, util, kwh in rows]


def usage_people(*, gpu_ids, start: dt.datetime, end: dt.datetime) -> dict[int, tuple[str | None, str | None]]:
    """Whom each job of those spans ran for: {job id: (user, account)} (one query)."""
    jobs = jobs_selectors.jobs().filter(id__in=_spans_query(gpu_ids, start, end).values("job_id")).order_by()
    return {pk: (user or None, account or None) for pk, user, account in jobs.values_list("id", "user", "account")}


def interruptions_between(*, gpu_ids, start: dt.datetime, end: dt.datetime) -> dict[int, float]:
    """The jobs that a ticket opened in [start, end) on one of these GPUs interrupted: {job id:
    GPU-hours lost} (the jobs' own verdicts, portal.jobs; one query)."""
    rows = jobs_selectors.jobs().filter(
        interrupted=True, interrupted_by__gpu_id__in=gpu_ids, interrupted_by__first_seen__gte=start,
        interrupted_by__first_seen__lt=end,
    ).values_list("id", "gpu_hours_lost")  # fmt: skip
    return {job_id: hours or 0.0 for job_id, hours in rows}


def rest_policy() -> RestPolicy:
    _enabled, params = RuleParams().get(NO_REST_RULE, None)
    return RestPolicy(hours=params["open_for_s"] / HOUR, busy_pct=float(params["busy_util_pct"]),
                      gap_s=jobs_selectors.SPAN_GAP.total_seconds())  # fmt: skip


@dataclass(frozen=True)
class UsageQuery(ReportQuery):
    """The usage report's period and filters: the reliability report's, at most MAX_PERIOD long."""

    max_period: ClassVar[dt.timedelta | None] = MAX_PERIOD

    def reliability_query(self) -> ReportQuery:
        return ReportQuery(start=self.start, end=self.end, host=self.host, model=self.model)


@dataclass
class UsageReport:
    query: UsageQuery
    fleet: dict
    users: list[dict]
    accounts: list[dict]
    models: list[dict]
    days: list[dict] = field(default_factory=list)
    flat_out: list[dict] = field(default_factory=list)
    rest_hours: float = 0.0
    idle_threshold_pct: float = 0.0
    rest_busy_pct: float = 0.0

    def as_json(self) -> dict:
        return json_rounded(
            {
                "period": {"from": self.query.start.isoformat(), "to": self.query.end.isoformat()},
                "fleet": {name: self.fleet[name] for name in FLEET_FIELDS},
                "users": [{"user": row["user"], **{n: row[n] for n in USER_FIELDS}} for row in self.users],
                "accounts": [{"account": row["account"], **{n: row[n] for n in USER_FIELDS}} for row in self.accounts],
                "models": [{name: row[name] for name in MODEL_FIELDS} for row in self.models],
                "days": [{**row, "day": row["day"].isoformat()} for row in self.days],
                "flat_out": [
                    {**{n: row[n] for n in FLAT_OUT_FIELDS},
                     "started_at": row["started_at"].isoformat(), "ended_at": row["ended_at"].isoformat()}
                    for row in self.flat_out
                ],
            }
        )  # fmt: skip


# --- intervals (seconds since the epoch) ----------------------------------------------------------


def _merged_seconds(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of the intervals, as disjoint intervals in order."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1][1] = b
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


class DayBuckets:
    """Hours per UTC day of the period, with the period's edges cutting its first and last day."""

    def __init__(self, start: dt.datetime, end: dt.datetime):
        self.start, self.end = start.timestamp(), end.timestamp()
        self.first_day = dt.datetime.combine(start.astimezone(dt.UTC).date(), dt.time.min, tzinfo=dt.UTC)
        self.first = self.first_day.timestamp()
        self.count = max(1, math.ceil((self.end - self.first) / DAY_S))
        self.hours = [0.0] * self.count

    def add(self, a: float, b: float) -> None:
        a, b = max(a, self.start), min(b, self.end)
        while a < b:
            i = int((a - self.first) // DAY_S)
            edge = min(b, self.first + (i + 1) * DAY_S)
            self.hours[i] += (edge - a) / HOUR
            a = edge

    def days(self) -> list[dt.date]:
        return [(self.first_day + i * DAY).date() for i in range(self.count)]


# --- the listed GPUs and their service ------------------------------------------------------------


def _service(query: UsageQuery, available: DayBuckets) -> list[dict]:
    """The listed GPUs (the reliability report's) with their service hours; each GPU's in-service
    intervals go into the day buckets."""
    start, end = query.start, query.end
    gpu_query = listed_gpus(query.reliability_query())
    gpus = list(
        gpu_query.select_related("host")
        .only("id", "uuid", "index", "model_name", "status", "install_date", "created_at", "host__hostname")
        .order_by("host__hostname", "index", "id")
    )
    ids = gpu_query.values("id")
    history, retired_times = status_changes_of(ids, end), retired_times_of(ids)
    rows = []
    for gpu in gpus:
        retired_at = retired_at_of(gpu, retired_times)
        if retired_at is not None and retired_at < start:
            continue
        low = max(start, gpu_start(gpu))
        high = min(end, retired_at) if retired_at is not None else end
        hours = 0.0
        if high > low:
            cursor = low
            for a, b in [*out_for_repair_intervals(history.get(gpu.pk, []), low, high), (high, high)]:
                if a > cursor:
                    available.add(cursor.timestamp(), a.timestamp())
                    hours += (a - cursor).total_seconds() / HOUR
                cursor = max(cursor, b)
        rows.append({"id": gpu.pk, "uuid": gpu.uuid, "host": gpu.host.hostname, "index": gpu.index,
                     "model": gpu.model_name, "service_hours": hours})  # fmt: skip
    return rows


# --- the figures ----------------------------------------------------------------------------------


@dataclass
class _Totals:
    """Sums per (user, account) clipped to the period, each GPU's busy intervals and its busy runs,
    each model's energy."""

    people: dict = field(default_factory=dict)  # (user, account): [jobs, hours, util h, util × h, idle h, kWh]
    busy: dict = field(default_factory=lambda: defaultdict(list))  # gpu id: [(a, b)], seconds
    runs: dict = field(default_factory=lambda: defaultdict(list))  # gpu id: [(a, b, util, job id)], whole spans
    model_energy: dict = field(default_factory=lambda: defaultdict(lambda: [0.0, 0.0]))  # model: [kWh, hours]


_NOBODY = (None, None)


def _span_totals(query: UsageQuery, model_of: dict[int, str], spans: list[tuple], people: dict,
                 busy_pct: float) -> _Totals:  # fmt: skip
    """One pass over the spans, in numbers (the report's hot loop: no datetimes, no objects)."""
    totals = _Totals()
    sums, busy, runs, model_energy = totals.people, totals.busy, totals.runs, totals.model_energy
    jobs_of: dict[tuple, set] = defaultdict(set)
    start, end = query.start.timestamp(), query.end.timestamp()
    idle_min_s = IDLE_HOURS * HOUR
    for gpu_id, job_id, a, b, util, kwh in spans:
        model = model_of.get(gpu_id)
        if model is None:
            continue
        low, high = (a if a > start else start), (b if b < end else end)
        inside = high - low if high > low else 0.0
        hours = inside / HOUR
        person = people.get(job_id, _NOBODY)
        row = sums.get(person)
        if row is None:
            row = sums[person] = [0, 0.0, 0.0, 0.0, 0.0, None]
        jobs_of[person].add(job_id)
        row[1] += hours
        if util is not None:
            row[2] += hours
            row[3] += util * hours
            if util < IDLE_UTILIZATION_PCT and b - a >= idle_min_s:
                row[4] += hours
            if util >= busy_pct:
                runs[gpu_id].append((a, b, util, job_id))
            else:
                runs[gpu_id].append((a, b, None, job_id))  # breaks a run
        if kwh is not None:
            energy = kwh * (inside / (b - a) if b > a else 1.0)
            row[5] = (row[5] or 0.0) + energy
            model_row = model_energy[model]
            model_row[0] += energy
            model_row[1] += hours
        busy[gpu_id].append((low, high))
    for person, job_ids in jobs_of.items():
        sums[person][0] = len(job_ids)
    return totals


def _blank(name: str, value) -> dict:
    return {name: value, "jobs": 0, "gpu_hours": 0.0, "_util_h": 0.0, "_util_sum": 0.0, "idle_gpu_hours": 0.0,
            "energy_kwh": None, "interrupted_jobs": 0, "gpu_hours_lost": 0.0}  # fmt: skip


def _people(totals: _Totals, people: dict, lost_by_job: dict[int, float]) -> tuple[list[dict], list[dict]]:
    """The (user, account) sums added up per user and per account, with the interrupted jobs. A job
    has one user and one account, so its jobs add up too."""
    users: dict = {}
    accounts: dict = {}

    def rows_of(user, account):
        for rows, name, value in ((users, "user", user), (accounts, "account", account)):
            row = rows.get(value)
            if row is None:
                row = rows[value] = _blank(name, value)
            yield row

    for (user, account), (jobs, hours, util_h, util_sum, idle_h, kwh) in totals.people.items():
        for row in rows_of(user, account):
            row["jobs"] += jobs
            row["gpu_hours"] += hours
            row["_util_h"] += util_h
            row["_util_sum"] += util_sum
            row["idle_gpu_hours"] += idle_h
            if kwh is not None:
                row["energy_kwh"] = (row["energy_kwh"] or 0.0) + kwh
    for job_id, lost in lost_by_job.items():
        for row in rows_of(*people.get(job_id, _NOBODY)):
            row["interrupted_jobs"] += 1
            row["gpu_hours_lost"] += lost
    return _finished(users, "user"), _finished(accounts, "account")


def _finished(rows: dict, name: str) -> list[dict]:
    for row in rows.values():
        row["utilization_gpu_mean_pct"] = row["_util_sum"] / row["_util_h"] if row["_util_h"] > 0 else None
    # most GPU-hours first; ties by name, no name last
    return sorted(rows.values(), key=lambda r: (-r["gpu_hours"], r[name] is None, r[name] or ""))


def _models(gpus: list[dict], busy_by_gpu: dict[int, float], totals: _Totals, query: UsageQuery) -> list[dict]:
    failures: dict[str, int] = defaultdict(int)
    model_of = {gpu["id"]: gpu["model"] for gpu in gpus}
    for failure in failures_of(gpu_ids=list(model_of), start=query.start, end=query.end):
        failures[model_of[failure.gpu_id]] += 1
    models: dict[str, dict] = {}
    for gpu in gpus:
        row = models.setdefault(gpu["model"], {"model": gpu["model"], "gpus": 0, "gpu_hours_busy": 0.0,
                                               "service_hours": 0.0})  # fmt: skip
        row["gpus"] += 1
        row["gpu_hours_busy"] += busy_by_gpu.get(gpu["id"], 0.0)
        row["service_hours"] += gpu["service_hours"]
    for name, row in models.items():
        energy, hours = totals.model_energy.get(name, (0.0, 0.0))
        row["energy_kwh_per_gpu_hour"] = energy / hours if hours > 0 else None
        years = row["service_hours"] / HOURS_PER_YEAR
        row["failures_per_gpu_year"] = failures[name] / years if years > 0 else None
    return sorted(models.values(), key=lambda r: r["model"])


def _busy(totals: _Totals, busy_days: DayBuckets) -> dict[int, float]:
    """Each GPU's busy hours (its spans' union) into the day buckets; {gpu id: hours}."""
    busy_by_gpu = {}
    for gpu_id, intervals in totals.busy.items():
        merged = _merged_seconds(intervals)
        busy_by_gpu[gpu_id] = sum(b - a for a, b in merged) / HOUR
        for a, b in merged:
            busy_days.add(a, b)
    return busy_by_gpu


def usage_report(query: UsageQuery) -> UsageReport:
    available, busy_days = DayBuckets(query.start, query.end), DayBuckets(query.start, query.end)
    gpus = _service(query, available)
    by_id = {gpu["id"]: gpu for gpu in gpus}
    gpu_ids = listed_gpus(query.reliability_query()).values("id")
    spans = usage_spans(gpu_ids=gpu_ids, start=query.start, end=query.end)
    people = usage_people(gpu_ids=gpu_ids, start=query.start, end=query.end)
    rest = rest_policy()
    totals = _span_totals(query, {gpu["id"]: gpu["model"] for gpu in gpus}, spans, people, rest.busy_pct)
    busy_by_gpu = _busy(totals, busy_days)
    lost_by_job = interruptions_between(gpu_ids=gpu_ids, start=query.start, end=query.end)
    users, accounts = _people(totals, people, lost_by_job)
    available_h, busy_h = sum(g["service_hours"] for g in gpus), sum(busy_by_gpu.values())
    energies = [row["energy_kwh"] for row in users if row["energy_kwh"] is not None]
    fleet = {"gpus": len(gpus), "gpu_hours_available": available_h, "gpu_hours_busy": busy_h,
             "busy_pct": busy_h / available_h * 100 if available_h > 0 else None,
             "energy_kwh": sum(energies) if energies else None,
             "gpu_hours_lost": sum(lost_by_job.values())}  # fmt: skip
    days = [
        {"day": day, "gpu_hours_available": a, "gpu_hours_busy": b, "busy_pct": b / a * 100 if a > 0 else None}
        for day, a, b in zip(available.days(), available.hours, busy_days.hours, strict=True)
    ]
    return UsageReport(
        query=query, fleet=fleet, users=users, accounts=accounts, models=_models(gpus, busy_by_gpu, totals, query),
        days=days, flat_out=_flat_out(query, totals, by_id, rest), rest_hours=rest.hours,
        idle_threshold_pct=IDLE_UTILIZATION_PCT, rest_busy_pct=rest.busy_pct,
    )  # fmt: skip


def _flat_out(query: UsageQuery, totals: _Totals, gpus: dict[int, dict], rest: RestPolicy) -> list[dict]:
    """The GPUs that ran flat out past the rest policy in the period, as portal.jobs finds them
    (`flat_out_stretches`, the GPU page's own): asked only for the GPUs whose spans, in the numbers
    at hand, hold a busy run longer than the fleet's policy (none: no query), longest first."""
    candidates = []
    for gpu_id, own in totals.runs.items():
        run_start = run_end = None
        for a, b, util, _job_id in sorted(own):
            if util is None:  # under the busy level: not part of a run
                continue
            if run_end is None or a - run_end > rest.gap_s:
                run_start, run_end = a, b
            else:
                run_end = max(run_end, b)
            if (run_end - run_start) / HOUR > rest.hours:
                candidates.append(gpu_id)
                break
    if not candidates:
        return []
    stretches = flat_out_stretches(gpu_ids=candidates, start=query.start, end=query.end)
    users = dict(
        jobs_selectors.jobs().filter(key__in={key for s in stretches for key in s.jobs}).values_list("key", "user")
    )
    out = []
    for stretch in stretches:
        gpu = gpus[stretch.gpu_id]
        out.append({
            "gpu": gpu["uuid"], "host": gpu["host"], "index": gpu["index"], "model": gpu["model"],
            "started_at": stretch.started_at, "ended_at": stretch.ended_at, "hours": stretch.hours,
            "jobs": list(stretch.jobs), "users": sorted({users[key] for key in stretch.jobs if users.get(key)}),
        })  # fmt: skip
    return sorted(out, key=lambda r: (-r["hours"], r["host"], r["index"]))


def usage_charts(report: UsageReport) -> dict:
    """The page's charts as data for static/reports/usage.js (json_script: names are data), with
    their labels in the reader's language."""
    unknown = gettext("(unknown)")
    users = report.users[:30]
    return {
        "labels": {
            "busy": gettext("Busy share (%)"), "gpu_hours": gettext("GPU-hours"),
            "idle": gettext("Idle GPU-hours"), "busy_part": gettext("Busy GPU-hours, not idle"),
            "energy": gettext("kWh per GPU-hour"), "failures": gettext("Failures per GPU-year"),
            "no_jobs": gettext("No job ran in the period."), "no_data": gettext("No data in the period."),
        },
        "days": {"x": [row["day"].isoformat() for row in report.days],
                 "y": [None if row["busy_pct"] is None else round(row["busy_pct"], 2) for row in report.days]},
        "users": {"names": [row["user"] or unknown for row in users],
                  "busy": [round(row["gpu_hours"] - row["idle_gpu_hours"], 3) for row in users],
                  "idle": [round(row["idle_gpu_hours"], 3) for row in users]},
        "models": {"names": [row["model"] or unknown for row in report.models],
                   "energy": [_round_or_none(row["energy_kwh_per_gpu_hour"], 4) for row in report.models],
                   "failures": [_round_or_none(row["failures_per_gpu_year"], 4) for row in report.models]},
    }  # fmt: skip


def _round_or_none(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
