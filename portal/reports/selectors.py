"""The reliability report (portal-api-v1.md, "Reliability report") and the repair-history reads.

Everything is aggregated from maintenance records, status-history rows and ticket rows, in SQL
where it sums (repairs, downtime, cost, hardware tickets: one GROUP BY each), never from raw
readings: a year of 1,000 GPUs is a handful of queries whatever the history's length.

Definitions, per GPU, for the half-open period [from, to):
- listed: its start (install_date at 00:00 UTC if set, else the registration) before `to`, and
  not retired before `from` (retired: its status
  is `retired`, since its last change to `retired` in the status history);
- service_hours: from max(from, start) to min(to, retired_at), start = install_date at 00:00 UTC if
  set, else the registration; minus the hours inside that window its history has it out_for_repair
  (an out_for_repair row lasts until the GPU's next status change);
- repairs / downtime_hours / cost: `repair` records on the GPU itself with performed_at in the
  period (unset downtime and cost count 0);
- mtbf_hours = service_hours / repairs, mttr_hours = downtime_hours / repairs (null for 0 repairs);
  availability = service_hours / (service_hours + downtime_hours) (null when both are 0);
- hardware_tickets: tickets on the GPU with first_seen in the period from a failure rule (any category of
  portal.maintenance.failures, thermal included);
- models and fleet: the listed GPUs' sums, then the same formulas.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, ClassVar

from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_noop

from portal.core.errors import InvalidInput
from portal.fleet import selectors as fleet_selectors
from portal.fleet.identifiers import HOSTNAME_RE, HOSTNAME_RULE
from portal.fleet.selectors import GpuStatus, Kind
from portal.jobs import selectors as jobs_selectors
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.failures import FAILURE_RULES, RULE_CATEGORY
from portal.reports import hooks
from portal.reports.baselines import OTHER, studies_as_json
from portal.reports.failures import Reason, failure_rates, failures_of, is_hardware_failure, lemons
from portal.reports.stats import mtbf_interval

if TYPE_CHECKING:  # types in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu, GpuStatusChange

HOUR = 3600.0
# Below this many failures a rate is mostly noise: the page and the PDF say so.
FEW_FAILURES = 3
MTBF_CONFIDENCE = 0.90
REPEAT_WINDOW = dt.timedelta(days=90)
REPEAT_FAILURES = 2
# Why a GPU is a repeat offender (Reason: shown in the reader's language, English in the JSON).
FAILURES_WITHIN = gettext_noop("%(count)s hardware failures within %(window)s days (%(first)s and %(second)s)")
XID_AGAIN = gettext_noop("a hardware XID (%(category)s) again on %(again)s after the repair of %(repaired)s")
GPU_FIELDS = (
    "uuid", "hostname", "index", "model", "serial", "service_hours", "repairs", "downtime_hours", "cost",
    "mtbf_hours", "mttr_hours", "availability", "hardware_tickets",
)  # fmt: skip
SUM_FIELDS = ("service_hours", "repairs", "downtime_hours", "cost")


@dataclass(frozen=True)
class ReportQuery:
    start: dt.datetime
    end: dt.datetime
    host: str | None = None
    model: str | None = None
    max_period: ClassVar[dt.timedelta | None] = None  # the longest period a report may ask for

    def __post_init__(self):
        problems = {}
        for name, value in (("from", self.start), ("to", self.end)):
            if value.tzinfo is None or value.utcoffset() is None:
                problems[name] = "Needs a time zone (RFC 3339, e.g. 2026-01-01T00:00:00Z)."
        if not problems and self.end <= self.start:
            problems["to"] = "Must be later than 'from'."
        elif not problems and self.max_period is not None and self.end - self.start > self.max_period:
            problems["to"] = f"The period may be at most {self.max_period.days} days."
        if (host_error := host_problem(self.host)) is not None:
            problems["host"] = host_error
        if problems:
            raise InvalidInput("invalid report filter", field_errors=problems)


def host_problem(host: str | None) -> str | None:
    """Why `host` cannot filter the report (None when it can): it must be a host name (or absent)."""
    if host is None or HOSTNAME_RE.fullmatch(host):  # match() would take "node-1\n" ($ before a final newline)
        return None
    return f"Not a host name ({HOSTNAME_RULE})."


@dataclass
class Report:
    query: ReportQuery
    gpus: list[dict]
    models: list[dict]
    fleet: dict
    repeat_offenders: list[dict] = field(default_factory=list)
    failure_rates: dict = field(default_factory=dict)
    lemons: dict = field(default_factory=lambda: {"gpus": [], "hosts": []})
    # What the apps above add (hooks.reliability_sections: inventory's "rma").
    added: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return json_rounded(
            {
                "from": self.query.start.isoformat(),
                "to": self.query.end.isoformat(),
                "host": self.query.host,
                "model": self.query.model,
                "gpus": [{name: row[name] for name in GPU_FIELDS} for row in self.gpus],
                "models": [
                    {
                        name: row[name]
                        for name in ("model", "gpus", *SUM_FIELDS, "mtbf_hours", "mttr_hours", "availability")
                    }
                    for row in self.models
                ],
                "fleet": {
                    name: self.fleet[name]
                    for name in ("gpus", *SUM_FIELDS, "mtbf_hours", "mttr_hours", "availability", "gpu_hours_lost")
                },
                "repeat_offenders": [
                    {**o, "reasons": [r.english() for r in o["reasons"]]} for o in self.repeat_offenders
                ],
                "failure_rates": self.failure_rates,
                "lemons": {
                    "gpus": [{**gpu, "reasons": [r.english() for r in gpu["reasons"]]} for gpu in self.lemons["gpus"]],
                    "hosts": [
                        {**host, "reasons": [r.english() for r in host["reasons"]]} for host in self.lemons["hosts"]
                    ],
                },
                "published_studies": studies_as_json(),
                **self.added,
            }
        )


def json_rounded(value):
    """Floats to 6 decimals (hours and ratios; no binary noise such as 8759.999999999998)."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {key: json_rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_rounded(item) for item in value]
    return value


def _formulas(row: dict) -> dict:
    repairs, service, downtime = row["repairs"], row["service_hours"], row["downtime_hours"]
    row["mtbf_hours"] = service / repairs if repairs else None
    row["mttr_hours"] = downtime / repairs if repairs else None
    row["availability"] = service / (service + downtime) if (service + downtime) > 0 else None
    return row


def gpu_start(gpu: Gpu) -> dt.datetime:
    if gpu.install_date is not None:
        return dt.datetime.combine(gpu.install_date, dt.time.min, tzinfo=dt.UTC)
    return gpu.created_at


def listed_gpus(query: ReportQuery):
    """The GPUs the report lists (before the retirement test, which needs the history): those whose
    start (`gpu_start`) is before `to`."""
    # install_date at 00:00 UTC < end  <=>  install_date <= the UTC date of the instant just before end
    last_install_day = (query.end.astimezone(dt.UTC) - dt.timedelta(microseconds=1)).date()
    gpus = fleet_selectors.gpus().filter(
        Q(install_date__isnull=False, install_date__lte=last_install_day)
        | Q(install_date__isnull=True, created_at__lt=query.end)
    )
    if query.host:
        gpus = gpus.filter(host__hostname=query.host)
    if query.model:
        gpus = gpus.filter(model_name=query.model)
    return gpus


def status_changes_of(gpu_ids_query, end: dt.datetime) -> dict[int, list[tuple[dt.datetime, str]]]:
    """Each GPU's status changes before `end`, in order (one query)."""
    rows: dict[int, list[tuple[dt.datetime, str]]] = defaultdict(list)
    changes = (
        fleet_selectors.status_changes()
        .filter(gpu__in=gpu_ids_query, changed_at__lt=end)
        .order_by("gpu_id", "changed_at", "id")
        .values_list("gpu_id", "changed_at", "to_status")
    )
    for gpu_id, changed_at, to_status in changes.iterator(chunk_size=5000):
        rows[gpu_id].append((changed_at, to_status))
    return rows


def retired_times_of(gpu_ids_query) -> dict[int, dt.datetime]:
    """When each GPU whose status is `retired` was retired: its last change to it (one query)."""
    return dict(
        fleet_selectors.status_changes()
        .filter(gpu__in=gpu_ids_query, gpu__status=GpuStatus.RETIRED, to_status=GpuStatus.RETIRED)
        .values("gpu_id")
        .annotate(at=Max("changed_at"))
        .values_list("gpu_id", "at")
    )


def retired_at_of(gpu: Gpu, retired_times: dict[int, dt.datetime]) -> dt.datetime | None:
    if gpu.status != GpuStatus.RETIRED:
        return None
    return retired_times.get(gpu.pk, gpu.created_at)  # no row: retired before its history began


def out_for_repair_intervals(changes, low: dt.datetime, high: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """The GPU's out-for-repair intervals inside [low, high), in order, from its status changes
    ((changed_at, to_status), oldest first): an out_for_repair row lasts until the next change."""
    out = []
    for i, (changed_at, to_status) in enumerate(changes):
        if to_status != GpuStatus.OUT_FOR_REPAIR:
            continue
        until = changes[i + 1][0] if i + 1 < len(changes) else high
        a, b = max(changed_at, low), min(until, high)
        if b > a:
            out.append((a, b))
    return out


def _out_for_repair_seconds(changes, low: dt.datetime, high: dt.datetime) -> float:
    return sum((b - a).total_seconds() for a, b in out_for_repair_intervals(changes, low, high))


def gpu_service_hours(gpu: Gpu, changes, retired_at: dt.datetime | None, start: dt.datetime, end: dt.datetime) -> float:
    low = max(start, gpu_start(gpu))
    high = min(end, retired_at) if retired_at is not None else end
    if high <= low:
        return 0.0
    return ((high - low).total_seconds() - _out_for_repair_seconds(changes, low, high)) / HOUR


def _hardware_ticket_filter() -> Q:
    return Q(rule__in=FAILURE_RULES)


def _repair_totals(ids, start: dt.datetime, end: dt.datetime) -> dict[int, dict]:
    """Per GPU id: the repairs in the period, their downtime hours and their cost."""
    return {
        row["gpu_id"]: row
        for row in fleet_selectors.records()
        .filter(kind=Kind.REPAIR, gpu__in=ids, performed_at__gte=start, performed_at__lt=end)
        .values("gpu_id")
        .annotate(
            n=Count("id"),
            downtime=Coalesce(Sum("downtime_hours"), Decimal(0)),
            cost=Coalesce(Sum("cost"), Decimal(0)),
        )
    }


def _gpu_rows(query: ReportQuery) -> list[dict]:
    """One row per GPU in service at some time in the period, with its hours, repairs and tickets."""
    start, end = query.start, query.end
    gpu_query = listed_gpus(query)
    gpus = list(
        gpu_query.select_related("host")
        .only("id", "uuid", "index", "model_name", "serial", "status", "install_date", "created_at", "host__hostname")
        .order_by("host__hostname", "index", "id")
    )
    ids = gpu_query.values("id")
    history = status_changes_of(ids, end)
    retired_times = retired_times_of(ids)
    repairs = _repair_totals(ids, start, end)
    # Failure tickets only, as the failure rates count them (an XID ticket of codes that do not count is none).
    tickets: dict[int, int] = defaultdict(int)
    for gpu_id, rule, evidence in (
        maintenance_selectors.tickets()
        .filter(_hardware_ticket_filter(), gpu__in=ids, first_seen__gte=start, first_seen__lt=end)
        .values_list("gpu_id", "rule", "evidence")
    ):
        if is_hardware_failure(rule, evidence):
            tickets[gpu_id] += 1

    rows = []
    for gpu in gpus:
        changes = history.get(gpu.pk, [])
        retired_at = retired_at_of(gpu, retired_times)
        if retired_at is not None and retired_at < start:
            continue
        agg = repairs.get(gpu.pk)
        row = {
            "uuid": gpu.uuid,
            "hostname": gpu.host.hostname,
            "index": gpu.index,
            "model": gpu.model_name,
            "serial": gpu.serial,
            "service_hours": gpu_service_hours(gpu, changes, retired_at, start, end),
            "repairs": agg["n"] if agg else 0,
            "downtime_hours": float(agg["downtime"]) if agg else 0.0,
            "cost": float(agg["cost"]) if agg else 0.0,
            "hardware_tickets": tickets.get(gpu.pk, 0),
            "status": gpu.status,
            "retired_at": retired_at,
            "_id": gpu.pk,
            "_host_id": gpu.host_id,
        }
        rows.append(_formulas(row))
    return rows


def _model_totals(rows: list[dict]) -> list[dict]:
    """The rows summed per GPU model, by model name, with each model's MTBF interval."""
    by_model: dict[str, dict] = {}
    for row in rows:
        model = by_model.setdefault(row["model"], {"model": row["model"], "gpus": 0, **dict.fromkeys(SUM_FIELDS, 0)})
        model["gpus"] += 1
        for name in SUM_FIELDS:
            model[name] += row[name]
        model["hardware_tickets"] = model.get("hardware_tickets", 0) + row["hardware_tickets"]
    models = []
    for model in sorted(by_model.values(), key=lambda m: m["model"]):
        model["cost"] = round(model["cost"], 2)
        _formulas(model)
        low, high = mtbf_interval(model["service_hours"], model["repairs"], MTBF_CONFIDENCE)
        model["mtbf_low"], model["mtbf_high"] = low, high
        model["few_failures"] = model["repairs"] < FEW_FAILURES
        models.append(model)
    return models


def _fleet_totals(rows: list[dict]) -> dict:
    """The rows summed over the whole fleet, with its MTBF interval."""
    fleet = {"gpus": len(rows), **{name: sum(row[name] for row in rows) for name in SUM_FIELDS}}
    fleet["cost"] = round(fleet["cost"], 2)
    fleet["hardware_tickets"] = sum(row["hardware_tickets"] for row in rows)
    _formulas(fleet)
    fleet["mtbf_low"], fleet["mtbf_high"] = mtbf_interval(fleet["service_hours"], fleet["repairs"], MTBF_CONFIDENCE)
    fleet["few_failures"] = fleet["repairs"] < FEW_FAILURES
    return fleet


def reliability_report(query: ReportQuery, *, with_offenders: bool = True) -> Report:
    start, end = query.start, query.end
    rows = _gpu_rows(query)
    models = _model_totals(rows)
    fleet = _fleet_totals(rows)

    offenders = repeat_offenders(gpu_ids=[row["_id"] for row in rows], start=start, end=end) if with_offenders else {}
    for row in rows:
        row["repeat_offender"] = offenders.get(row["_id"])
        row["few_failures"] = row["repairs"] < FEW_FAILURES
    offender_list = [
        {"uuid": row["uuid"], "hostname": row["hostname"], "index": row["index"], "serial": row["serial"],
         "reasons": row["repeat_offender"]}
        for row in rows if row["repeat_offender"]
    ]  # fmt: skip
    failures = failures_of(gpu_ids=[row["_id"] for row in rows], start=start, end=end)
    rates = failure_rates(failures, fleet["service_hours"])
    _gpu_hours_lost_add(fleet, rates, gpu_ids=[row["_id"] for row in rows], start=start, end=end)
    return Report(
        query=query,
        gpus=rows,
        models=models,
        fleet=fleet,
        repeat_offenders=offender_list,
        failure_rates=rates,
        lemons=lemons(rows=rows, failures=failures, fleet_rate=rates["all"]["per_gpu_year"], end=end),
        added={
            key: value for entry in hooks.reliability_sections for key, value in entry.function(query=query).items()
        },
    )


def _gpu_hours_lost_add(fleet: dict, rates: dict, *, gpu_ids, start: dt.datetime, end: dt.datetime) -> None:
    """The GPU-hours lost by the jobs that the period's failures interrupted (portal-api-v1.md, "Jobs
    on GPUs"): the fleet's, and per failure category (a rule no category names counts as `other`)."""
    by_rule = jobs_selectors.gpu_hours_lost_by_rule(gpu_ids=gpu_ids, start=start, end=end)
    by_category: dict[str, float] = defaultdict(float)
    for rule, hours in by_rule.items():
        by_category[RULE_CATEGORY.get(rule, OTHER)] += hours
    fleet["gpu_hours_lost"] = sum(by_rule.values())
    for row in rates["categories"]:
        row["gpu_hours_lost"] = by_category.get(row["category"], 0.0)
    rates["all"]["gpu_hours_lost"] = fleet["gpu_hours_lost"]


# --- repeat offenders -----------------------------------------------------------------------


def repeat_offenders(*, gpu_ids, start: dt.datetime, end: dt.datetime) -> dict[int, list[Reason]]:
    """GPUs with >= 2 hardware failures within 90 days (at least one in the period), or a hardware
    XID seen again after a repair (the later one in the period). {gpu id: [reasons]}."""
    failures: dict[int, list[tuple[dt.datetime, str]]] = defaultdict(list)
    recent = (
        maintenance_selectors.tickets()
        .filter(
            _hardware_ticket_filter(), gpu_id__in=gpu_ids, first_seen__gte=start - REPEAT_WINDOW, first_seen__lt=end
        )
        .values_list("gpu_id", "first_seen", "rule", "evidence")
    )
    rows = list(recent)
    # For "a hardware XID again after a repair": the earlier XID tickets of GPUs with one in the period.
    xid_gpus = {gpu_id for gpu_id, first_seen, rule, _ in rows if rule.startswith("xid_") and first_seen >= start}
    if xid_gpus:
        rows += maintenance_selectors.tickets().filter(
            gpu_id__in=xid_gpus, rule__in=[r for r in FAILURE_RULES if r.startswith("xid_")],
            first_seen__lt=start - REPEAT_WINDOW,
        ).values_list("gpu_id", "first_seen", "rule", "evidence")  # fmt: skip
    for gpu_id, first_seen, rule, evidence in sorted(rows, key=lambda row: (row[0], row[1])):
        if is_hardware_failure(rule, evidence):
            failures[gpu_id].append((first_seen, rule))
    if not failures:
        return {}
    repairs: dict[int, list[dt.datetime]] = defaultdict(list)
    for gpu_id, performed_at in (
        fleet_selectors.records()
        .filter(kind=Kind.REPAIR, gpu_id__in=list(failures))
        .filter(performed_at__lt=end)
        .values_list("gpu_id", "performed_at")
    ):
        repairs[gpu_id].append(performed_at)

    result: dict[int, list[Reason]] = {}
    for gpu_id, events in failures.items():
        reasons = []
        recent = [(t, r) for t, r in events if t >= start - REPEAT_WINDOW]
        for i in range(1, len(recent)):
            t, _ = recent[i]
            if t >= start and t - recent[i - 1][0] <= REPEAT_WINDOW:
                reasons.append(Reason(FAILURES_WITHIN, {
                    "count": REPEAT_FAILURES, "window": REPEAT_WINDOW.days, "first": f"{recent[i - 1][0]:%Y-%m-%d}",
                    "second": f"{t:%Y-%m-%d}"}))  # fmt: skip
                break
        for repaired_at in sorted(repairs.get(gpu_id, [])):
            before = {r for t, r in events if t < repaired_at and r.startswith("xid_")}
            again = [(t, r) for t, r in events if t > repaired_at and r in before and start <= t < end]
            if again:
                reasons.append(Reason(XID_AGAIN, {
                    "category": RULE_CATEGORY[again[0][1]], "again": f"{again[0][0]:%Y-%m-%d}",
                    "repaired": f"{repaired_at:%Y-%m-%d}"}))  # fmt: skip
                break
        if reasons:
            result[gpu_id] = reasons
    return result


def gpu_repeat_offender(*, gpu: Gpu, now: dt.datetime) -> list[Reason]:
    """The GPU page's flag: the reasons it is a repeat offender over the last 90 days (or [])."""
    return repeat_offenders(gpu_ids=[gpu.pk], start=now - REPEAT_WINDOW, end=now + dt.timedelta(seconds=1)).get(
        gpu.pk, []
    )


# --- one GPU's repair history ---------------------------------------------------------------


def return_unproven(change: GpuStatusChange) -> bool:
    """A return to service (into in_service from another status) that neither a passed diagnostic
    proved nor an admin forced: the report flags it for the auditor."""
    returned = change.to_status == GpuStatus.IN_SERVICE and change.from_status not in ("", GpuStatus.IN_SERVICE)
    return returned and not change.override and not change.proof


def status_intervals(*, gpu: Gpu, now: dt.datetime) -> list[dict]:
    """The GPU's status history as intervals (from, to or None while current, status, who, why,
    and for a return to service what proved it, or that nothing did)."""
    changes = list(fleet_selectors.gpu_status_history(gpu=gpu))
    intervals = []
    for i, change in enumerate(changes):
        until = changes[i + 1].changed_at if i + 1 < len(changes) else None
        intervals.append(
            {
                "status": change.to_status,
                "from": change.changed_at,
                "to": until,
                "hours": ((until or now) - change.changed_at).total_seconds() / HOUR,
                "by": change.changed_by.get_username() if change.changed_by_id else "",
                "source": change.source,
                "reason": change.reason,
                "override": change.override,
                "proof": change.proof,
                "unproven": return_unproven(change),
            }
        )
    return intervals
