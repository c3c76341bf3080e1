"""Failures by category, their rates per GPU-year, and lemons: GPUs and hosts that fail again soon
after a repair, or far more often than the rest of the fleet.

A failure is a ticket of a failure rule (below, by category; an XID ticket only when one of its
codes is a hardware failure in NVIDIA's catalog), or a repair that no failure ticket on the GPU
explains (a person found the fault: `other`). Rates are failures in the period per GPU-year of
service in the period (the report's service hours).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from django.utils.translation import gettext, gettext_noop

from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import Kind
from portal.maintenance import selectors as maintenance_selectors
from portal.maintenance.failures import FAILURE_RULES, evidence_codes, ticket_category
from portal.reports.baselines import ALL, CATEGORIES, CATEGORY_LABELS, HOURS_PER_YEAR, OTHER, published_rates

# A repair with no failure ticket on its GPU this long before it is a failure a person found.
UNEXPLAINED_REPAIR_LOOKBACK = dt.timedelta(days=30)
# A lemon fails again within this long after a repair...
LEMON_WINDOW = dt.timedelta(days=90)
# ...or fails at least this many times as often as the fleet, with at least LEMON_MIN_FAILURES failures
# (one failure of one GPU in a quiet fleet is bad luck, not a lemon).
LEMON_RATE_FACTOR = 3.0
LEMON_MIN_FAILURES = 2

AGAIN_AFTER_REPAIR = gettext_noop(
    "failed again on %(failed)s (%(category)s), within %(window)s days of the repair of %(repaired)s"
)
AGAIN_AFTER_HOST_REPAIR = gettext_noop(
    "GPU %(index)s failed on %(failed)s (%(category)s), within %(window)s days of the host's repair of %(repaired)s"
)
RATE_TIMES_FLEET = gettext_noop(
    "%(failures)s failures in the period: %(rate)s per GPU-year, %(factor)s times the fleet's %(fleet_rate)s"
)


@dataclass(frozen=True)
class Failure:
    gpu_id: int
    at: dt.datetime
    category: str


@dataclass(frozen=True)
class Reason:
    """Why something is a lemon: a message id and its parameters, shown in the reader's language."""

    message: str
    params: dict

    def text(self) -> str:
        """In the active language."""
        return gettext(self.message) % self._params(gettext)

    __str__ = text  # a template names it in the reader's language

    def english(self) -> str:
        return self.message % self._params(str)

    def _params(self, translate) -> dict:
        if "category" not in self.params:
            return self.params
        return {**self.params, "category": translate(CATEGORY_LABELS[self.params["category"]])}


def is_hardware_failure(rule: str, evidence) -> bool:
    """A failure-rule ticket is a failure, but an XID ticket only when one of its codes is a hardware code
    of NVIDIA's catalog (GSP/firmware or application codes never count): portal.maintenance.failures."""
    return ticket_category(rule, evidence_codes(evidence)) is not None


def failures_of(*, gpu_ids: list[int], start: dt.datetime, end: dt.datetime) -> list[Failure]:
    """Every failure of these GPUs in [start, end), in time order (two queries)."""
    tickets = maintenance_selectors.tickets().filter(
        rule__in=list(FAILURE_RULES), gpu_id__in=gpu_ids, first_seen__gte=start - UNEXPLAINED_REPAIR_LOOKBACK,
        first_seen__lt=end,
    ).values_list("gpu_id", "first_seen", "rule", "evidence")  # fmt: skip
    ticketed: dict[int, list[dt.datetime]] = defaultdict(list)
    failures = []
    for gpu_id, first_seen, rule, evidence in tickets:
        category = ticket_category(rule, evidence_codes(evidence))
        if category is None:
            continue
        ticketed[gpu_id].append(first_seen)
        if first_seen >= start:
            failures.append(Failure(gpu_id, first_seen, category))
    repairs = (
        fleet_selectors.records()
        .filter(kind=Kind.REPAIR, gpu_id__in=gpu_ids, performed_at__gte=start, performed_at__lt=end)
        .values_list("gpu_id", "performed_at")
    )
    for gpu_id, performed_at in repairs:
        explained = any(performed_at - UNEXPLAINED_REPAIR_LOOKBACK <= t <= performed_at for t in ticketed[gpu_id])
        if not explained:
            failures.append(Failure(gpu_id, performed_at, OTHER))
    return sorted(failures, key=lambda f: (f.at, f.gpu_id))


def _rate(failures: int, service_hours: float) -> float | None:
    return failures / (service_hours / HOURS_PER_YEAR) if service_hours > 0 else None


def failure_rates(failures: list[Failure], service_hours: float) -> dict:
    """The fleet's failures and rate per GPU-year by category, beside the published rates."""
    published = published_rates()
    counts = defaultdict(int)
    for failure in failures:
        counts[failure.category] += 1

    def row(category: str, count: int) -> dict:
        return {
            "category": category,
            "failures": count,
            "per_gpu_year": _rate(count, service_hours),
            "published": [
                {"source": p["source"], "label": p["label"], "per_gpu_year": p["per_gpu_year"]}
                for p in published.get(category, [])
            ],
        }

    return {
        "gpu_years": service_hours / HOURS_PER_YEAR,
        "categories": [row(category, counts[category]) for category in CATEGORIES],
        "all": row(ALL, len(failures)),
    }


def _again_after_repair(failures: list[Failure], repairs: list[dt.datetime]) -> Reason | None:
    for failure in failures:
        for repaired_at in sorted(repairs, reverse=True):
            if repaired_at < failure.at <= repaired_at + LEMON_WINDOW:
                return Reason(
                    AGAIN_AFTER_REPAIR,
                    {"failed": f"{failure.at:%Y-%m-%d}", "category": failure.category,
                     "window": LEMON_WINDOW.days, "repaired": f"{repaired_at:%Y-%m-%d}"},
                )  # fmt: skip
    return None


def _rate_reason(count: int, service_hours: float, fleet_rate: float | None) -> Reason | None:
    rate = _rate(count, service_hours)
    if count < LEMON_MIN_FAILURES or rate is None or not fleet_rate or rate < LEMON_RATE_FACTOR * fleet_rate:
        return None
    return Reason(
        RATE_TIMES_FLEET,
        {
            "failures": count,
            "rate": f"{rate:.2f}",
            "factor": f"{rate / fleet_rate:.1f}",
            "fleet_rate": f"{fleet_rate:.2f}",
        },
    )


def _repairs_before(*, gpu_ids: list[int], host_ids: list[int], end: dt.datetime):
    """Repairs that a failure in the period may come back after: per GPU, and per host (records on the
    whole host)."""
    by_gpu: dict[int, list[dt.datetime]] = defaultdict(list)
    by_host: dict[int, list[dt.datetime]] = defaultdict(list)
    records = fleet_selectors.records().filter(kind=Kind.REPAIR, performed_at__lt=end).filter(
        gpu_id__in=gpu_ids
    ) | fleet_selectors.records().filter(kind=Kind.REPAIR, performed_at__lt=end, gpu__isnull=True, host_id__in=host_ids)
    for gpu_id, host_id, performed_at in records.values_list("gpu_id", "host_id", "performed_at"):
        (by_gpu[gpu_id] if gpu_id is not None else by_host[host_id]).append(performed_at)
    return by_gpu, by_host


def lemons(*, rows: list[dict], failures: list[Failure], fleet_rate: float | None, end: dt.datetime) -> dict:
    """{"gpus": [...], "hosts": [...]}: the report's rows (dicts with _id, _host_id, uuid, hostname, index,
    serial, service_hours) that are lemons, each with its failures, rate and reasons (Reason objects)."""
    per_gpu: dict[int, list[Failure]] = defaultdict(list)
    for failure in failures:
        per_gpu[failure.gpu_id].append(failure)
    repairs_by_gpu, repairs_by_host = _repairs_before(
        gpu_ids=[row["_id"] for row in rows], host_ids=sorted({row["_host_id"] for row in rows}), end=end
    )
    gpus, hosts = [], {}
    for row in rows:
        own = per_gpu.get(row["_id"], [])
        host = hosts.setdefault(
            row["_host_id"],
            {"hostname": row["hostname"], "gpus": 0, "failures": 0, "service_hours": 0.0, "reasons": []},
        )
        host["gpus"] += 1
        host["failures"] += len(own)
        host["service_hours"] += row["service_hours"]
        host_reason = _again_after_repair(own, repairs_by_host.get(row["_host_id"], []))
        if host_reason is not None and not host["reasons"]:
            host["reasons"].append(Reason(AGAIN_AFTER_HOST_REPAIR, {**host_reason.params, "index": row["index"]}))
        reasons = [
            reason
            for reason in (
                _again_after_repair(own, repairs_by_gpu.get(row["_id"], [])),
                _rate_reason(len(own), row["service_hours"], fleet_rate),
            )
            if reason is not None
        ]
        if reasons:
            gpus.append(
                {"uuid": row["uuid"], "hostname": row["hostname"], "index": row["index"], "serial": row["serial"],
                 "failures": len(own), "per_gpu_year": _rate(len(own), row["service_hours"]), "reasons": reasons}
            )  # fmt: skip
    lemon_hosts = []
    for host in hosts.values():
        rate_reason = _rate_reason(host["failures"], host["service_hours"], fleet_rate)
        if rate_reason is not None:
            host["reasons"].append(rate_reason)
        if host["reasons"]:
            host["per_gpu_year"] = _rate(host["failures"], host["service_hours"])
            lemon_hosts.append({key: value for key, value in host.items() if key != "service_hours"})
    return {"gpus": gpus, "hosts": sorted(lemon_hosts, key=lambda h: h["hostname"])}
