"""Automatic checklist items: judged from telemetry and records when a run completes, each with
the evidence it was judged on (what the run's page and printout show).

Outcomes: "pass", "fail", "unknown" (no data to judge: never a ticket), and "pending" for the
cleaning check, which needs loaded readings from after the cleaning; a beat task judges it later
(services.verifications_finish). Each check reads the run's GPUs in one or two aggregate
queries, whatever the number of readings.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from statistics import median

from django.conf import settings
from django.db.models import Avg, Count, Max, Min, Q

from portal.checklists import messages
from portal.core.messages import Said
from portal.diagnostics import selectors as diagnostics_selectors
from portal.diagnostics import services as diagnostics
from portal.diagnostics.selectors import Purpose
from portal.fleet import selectors as fleet_selectors
from portal.fleet.selectors import Kind
from portal.telemetry import metrics, store

PASS, FAIL, UNKNOWN, PENDING = "pass", "fail", "unknown", "pending"
# The reading columns the checks query, named by the metric registry. The evidence's own keys
# ("temperature_c", "power_w": stored with each run, read by its page) stay as they were written.
_TEMP, _FAN, _POWER, _UTIL = (
    m.name for m in (metrics.TEMPERATURE, metrics.FAN, metrics.POWER, metrics.UTILIZATION_GPU)
)

# Defaults of each check; a template item's `params` overrides them.
DEFAULTS: dict[str, dict] = {
    "idle_temperature": {"limit_c": 45, "window_min": 30, "idle_util_pct": 10},
    "ecc_clean": {"window_min": 60},
    "fans_respond": {"window_min": 60, "temp_spread_c": 10, "min_fan_rise_pct": 5},
    "recent_backup": {"days": 7},
    "cleaning_effect": {
        "min_drop_c": 3, "before_days": 7, "wait_days": 14, "loaded_util_pct": 80, "power_bin_w": 25,
        "min_per_bin": 5, "min_loaded_readings": 60,
    },
}  # fmt: skip


@dataclass
class AutoResult:
    """An automatic item's outcome and evidence; `evidence_msgs` holds the evidence's summary and
    per-GPU reasons (`why`, by GPU uuid) as messages (portal.checklists.messages)."""

    outcome: str
    evidence: dict = field(default_factory=dict)
    evidence_msgs: dict = field(default_factory=dict)


def _result(outcome: str, evidence: dict, summary: Said, why: dict[str, Said] | None = None) -> AutoResult:
    """The result, its evidence's summary (and each GPU's `why`) stored in English and as messages."""
    msgs = {"summary": summary.stored()}
    if why:
        msgs["why"] = {uuid: said.stored() for uuid, said in why.items()}
    return AutoResult(outcome, evidence, msgs)


def params_for(item: dict) -> dict:
    return {**DEFAULTS.get(item.get("auto_check") or "", {}), **(item.get("params") or {})}


def _combine(per_gpu: dict[int, str]) -> str:
    outcomes = set(per_gpu.values())
    if FAIL in outcomes:
        return FAIL
    if PENDING in outcomes:
        return PENDING
    if outcomes == {PASS}:
        return PASS
    return UNKNOWN


def _label(gpu) -> str:
    return f"GPU {gpu.index}"


def _per_gpu(gpus, start: dt.datetime, end: dt.datetime, *conditions: Q, **aggregates) -> dict[int, dict]:
    """The aggregates of each GPU's readings in [start, end) that meet the conditions, in one
    query: {GPU id: row}; a GPU without such readings is missing."""
    rows = store.readings_aggregate(gpu_ids=[g.pk for g in gpus], start=start, end=end, where=Q(*conditions),
                                    **aggregates)  # fmt: skip
    return {row["gpu_id"]: row for row in rows}


def idle_temperature(*, item, run, gpus, now) -> AutoResult:
    p = params_for(item)
    start = now - dt.timedelta(minutes=p["window_min"])
    temps: dict[int, list[int]] = {gpu.pk: [] for gpu in gpus}
    rows = store.readings_of(
        gpu_ids=list(temps), columns=("gpu_id", _TEMP), start=start, end=now,
        where=Q(**{f"{_UTIL}__lte": p["idle_util_pct"], f"{_TEMP}__isnull": False}),
    )  # fmt: skip
    for gpu_id, temperature in rows:
        temps[gpu_id].append(temperature)
    per_gpu, details = {}, []
    for gpu in gpus:
        values = temps[gpu.pk]
        if not values:
            per_gpu[gpu.pk] = UNKNOWN
            details.append({"gpu": _label(gpu), "uuid": gpu.uuid, "outcome": UNKNOWN, "idle_readings": 0})
            continue
        med = median(values)
        per_gpu[gpu.pk] = PASS if med < p["limit_c"] else FAIL
        details.append(
            {"gpu": _label(gpu), "uuid": gpu.uuid, "outcome": per_gpu[gpu.pk], "idle_readings": len(values),
             "median_c": round(med, 1), "max_c": max(values)}
        )  # fmt: skip
    outcome = _combine(per_gpu)
    hottest = max((d.get("median_c", 0) for d in details), default=0)
    summary = (
        messages.IDLE_OK(c=f"{hottest:g}", limit=p["limit_c"], min=p["window_min"])
        if outcome != UNKNOWN
        else messages.IDLE_NONE(util=p["idle_util_pct"], min=p["window_min"])
    )
    return _result(outcome, _evidence(summary, p, details, per_gpu, start, now), summary)


def ecc_clean(*, item, run, gpus, now) -> AutoResult:
    p = params_for(item)
    start = now - dt.timedelta(minutes=p["window_min"])
    rows = _per_gpu(
        gpus, start, now,
        n=Count("ts"),
        uncorrected=Max(metrics.ECC_UNCORRECTED_VOLATILE.name),
        uncorrected_total=Max(metrics.ECC_UNCORRECTED_AGGREGATE.name),
        pending_remap=Count("ts", filter=Q(**{metrics.REMAPPED_ROWS_PENDING.name: True})
                            | Q(**{metrics.RETIRED_PAGES_PENDING.name: True})),
        remap_failure=Count("ts", filter=Q(**{metrics.REMAPPED_ROWS_FAILURE.name: True})),
        reported=Count(metrics.ECC_UNCORRECTED_VOLATILE.name),
    )  # fmt: skip
    per_gpu, details = {}, []
    for gpu in gpus:
        row = rows.get(gpu.pk)
        if row is None or not row["reported"]:
            per_gpu[gpu.pk] = UNKNOWN
            details.append(
                {"gpu": _label(gpu), "uuid": gpu.uuid, "outcome": UNKNOWN, "readings": row["n"] if row else 0}
            )
            continue
        bad = (row["uncorrected"] or 0) > 0 or row["pending_remap"] > 0 or row["remap_failure"] > 0
        per_gpu[gpu.pk] = FAIL if bad else PASS
        details.append(
            {"gpu": _label(gpu), "uuid": gpu.uuid, "outcome": per_gpu[gpu.pk], "readings": row["n"],
             "uncorrected_volatile": row["uncorrected"], "uncorrected_aggregate": row["uncorrected_total"],
             "readings_with_pending_remap": row["pending_remap"], "readings_with_remap_failure": row["remap_failure"]}
        )  # fmt: skip
    outcome = _combine(per_gpu)
    failing = [d["gpu"] for d in details if d["outcome"] == FAIL]
    summary = {
        PASS: messages.ECC_OK(min=p["window_min"]),
        FAIL: messages.ECC_BAD(gpus=", ".join(failing)),
        UNKNOWN: messages.ECC_NONE(),
    }[outcome]
    return _result(outcome, _evidence(summary, p, details, per_gpu, start, now), summary)


def fans_respond(*, item, run, gpus, now) -> AutoResult:
    p = params_for(item)
    start = now - dt.timedelta(minutes=p["window_min"])
    rows = _per_gpu(
        gpus, start, now, Q(**{f"{_FAN}__isnull": False}),
        n=Count("ts"),
        fan_min=Min(_FAN),
        fan_max=Max(_FAN),
        temp_min=Min(_TEMP),
        temp_max=Max(_TEMP),
    )  # fmt: skip
    per_gpu, details = {}, []
    for gpu in gpus:
        row = rows.get(gpu.pk)
        if row is None:
            per_gpu[gpu.pk] = UNKNOWN
            details.append({"gpu": _label(gpu), "uuid": gpu.uuid, "outcome": UNKNOWN, "readings": 0})
            continue
        spinning = (row["fan_max"] or 0) > 0
        temp_spread = (row["temp_max"] or 0) - (row["temp_min"] or 0)
        fan_rise = (row["fan_max"] or 0) - (row["fan_min"] or 0)
        # With the temperature moving, the fans must follow; at a steady temperature spinning is all we can see.
        follows = temp_spread < p["temp_spread_c"] or fan_rise >= p["min_fan_rise_pct"]
        per_gpu[gpu.pk] = PASS if spinning and follows else FAIL
        details.append(
            {"gpu": _label(gpu), "uuid": gpu.uuid, "outcome": per_gpu[gpu.pk], "readings": row["n"],
             "fan_pct": [row["fan_min"], row["fan_max"]], "temperature_c": [row["temp_min"], row["temp_max"]]}
        )  # fmt: skip
    outcome = _combine(per_gpu)
    summary = {
        PASS: messages.FANS_OK(min=p["window_min"]),
        FAIL: messages.FANS_BAD(gpus=", ".join(d["gpu"] for d in details if d["outcome"] == FAIL)),
        UNKNOWN: messages.FANS_NONE(),
    }[outcome]
    return _result(outcome, _evidence(summary, p, details, per_gpu, start, now), summary)


def recent_backup(*, item, run, gpus, now) -> AutoResult:
    p = params_for(item)
    since = now - dt.timedelta(days=p["days"])
    last = (
        fleet_selectors.records()
        .filter(host_id=run.host_id, kind=Kind.BACKUP, performed_at__lte=now)
        .order_by("-performed_at")
        .values("pk", "performed_at", "verified", "destination")
        .first()
    )
    outcome = PASS if last and last["performed_at"] >= since else FAIL
    if last is None:
        summary = messages.BACKUP_NONE(days=p["days"])
    else:
        verified = messages.BACKUP_VERIFIED if last["verified"] else messages.BACKUP_UNVERIFIED
        summary = verified(at=f"{last['performed_at']:%Y-%m-%d %H:%M}", days=p["days"])
    evidence = {
        "summary": str(summary), "params": p, "checked_at": now.isoformat(), "scope": "host",
        "record": {"id": last["pk"], "performed_at": last["performed_at"].isoformat(),
                   "destination": last["destination"]} if last else None,
    }  # fmt: skip
    return _result(outcome, evidence, summary)


def _binned(gpu_ids, start, end, p) -> dict[int, dict[int, tuple[int, float]]]:
    """Loaded readings of each GPU between start and end, by power bin: {gpu: {bin: (n, mean °C)}}."""
    rows = store.readings_aggregate(
        gpu_ids=gpu_ids, start=start, end=end,
        where=Q(**{f"{_POWER}__isnull": False, f"{_TEMP}__isnull": False, f"{_UTIL}__gte": p["loaded_util_pct"]}),
        bins={"power_bin": (_POWER, p["power_bin_w"])}, n=Count("ts"), temp=Avg(_TEMP),
    )  # fmt: skip
    out: dict[int, dict[int, tuple[int, float]]] = {gpu_id: {} for gpu_id in gpu_ids}
    for row in rows:
        out[row["gpu_id"]][int(row["power_bin"])] = (row["n"], float(row["temp"]))
    return out


def cleaning_effect_judge(*, run, item, gpus, now) -> AutoResult:
    """Loaded readings before the run against loaded readings after it, at equal power (power
    bins both windows have): the mean drop must be at least `min_drop_c`. Pending until each GPU
    has `min_loaded_readings` after the run; unknown if that has not happened in `wait_days`."""
    p = params_for(item)
    before_start, before_end = run.started_at - dt.timedelta(days=p["before_days"]), run.started_at
    after_start = run.completed_at or now
    after_end = min(now, after_start + dt.timedelta(days=p["wait_days"]))
    ids = [g.pk for g in gpus]
    before = _binned(ids, before_start, before_end, p)
    after = _binned(ids, after_start, after_end, p) if after_end > after_start else {i: {} for i in ids}
    expired = now >= after_start + dt.timedelta(days=p["wait_days"])
    per_gpu, details, why = {}, [], {}
    for gpu in gpus:
        b, a = before[gpu.pk], after[gpu.pk]
        after_n = sum(n for n, _ in a.values())
        shared = sorted(k for k in set(b) & set(a) if b[k][0] >= p["min_per_bin"] and a[k][0] >= p["min_per_bin"])
        bins = [
            {"power_w": k * p["power_bin_w"] + p["power_bin_w"] / 2, "before_c": round(b[k][1], 1), "before_n": b[k][0],
             "after_c": round(a[k][1], 1), "after_n": a[k][0]}
            for k in shared
        ]  # fmt: skip
        detail = {"gpu": _label(gpu), "uuid": gpu.uuid, "bins": bins, "after_loaded_readings": after_n,
                  "before_loaded_readings": sum(n for n, _ in b.values())}  # fmt: skip
        if not b:
            per_gpu[gpu.pk] = UNKNOWN
            why[gpu.uuid] = messages.CLEANING_NO_BEFORE()
            detail["why"] = str(why[gpu.uuid])
        elif after_n < p["min_loaded_readings"] or not shared:
            per_gpu[gpu.pk] = UNKNOWN if expired else PENDING
            counted = messages.CLEANING_AFTER if shared or not after_n else messages.CLEANING_AFTER_NO_POWER
            why[gpu.uuid] = counted(n=after_n, need=p["min_loaded_readings"])
            detail["why"] = str(why[gpu.uuid])
        else:
            weight = sum(min(x["before_n"], x["after_n"]) for x in bins)
            drop = sum((x["before_c"] - x["after_c"]) * min(x["before_n"], x["after_n"]) for x in bins) / weight
            detail["drop_c"] = round(drop, 1)
            per_gpu[gpu.pk] = PASS if drop >= p["min_drop_c"] else FAIL
        detail["outcome"] = per_gpu[gpu.pk]
        details.append(detail)
    outcome = _combine(per_gpu)
    drops = [d["drop_c"] for d in details if "drop_c" in d]
    summary = {
        PENDING: messages.CLEANING_PENDING(),
        UNKNOWN: messages.CLEANING_UNKNOWN(),
        PASS: messages.CLEANING_PASS(c=f"{min(drops, default=0):g}", need=p["min_drop_c"]),
        FAIL: messages.CLEANING_FAIL(c=f"{min(drops, default=0):g}", need=p["min_drop_c"]),
    }[outcome]
    evidence = _evidence(summary, p, details, per_gpu, before_start, after_end)
    evidence["windows"] = {
        "before": [before_start.isoformat(), before_end.isoformat()],
        "after": [after_start.isoformat(), after_end.isoformat()],
    }
    return _result(outcome, evidence, summary, why)


def cleaning_effect(*, item, run, gpus, now) -> AutoResult:
    return cleaning_effect_judge(run=run, item=item, gpus=gpus, now=now)


def diagnostic_passed_judge(*, run, item, gpus, now, request: bool = False, user=None) -> AutoResult:
    """A diagnostic of level RETURN_TO_SERVICE_LEVEL or higher passed on each GPU after the repair,
    on the host's current driver (the rule a GPU's return to service follows). At sign-off
    (`request`), GPUs without one get one requested, and the item waits for it (pending); the beat
    task judges it again until it passed, failed or expired."""
    per_gpu, details, wanted = {}, [], []
    for gpu in gpus:
        detail = {"gpu": _label(gpu), "uuid": gpu.uuid}
        passing = diagnostics.passing_diagnostic_for_return(gpu)
        latest = passing or diagnostics.latest_for_return(gpu)
        state = latest.diagnostic.state if latest else ""
        if passing is not None:
            per_gpu[gpu.pk] = PASS
        elif latest is not None and state in diagnostics_selectors.OPEN_STATES:
            per_gpu[gpu.pk] = PENDING
        elif (
            latest is not None
            and state in diagnostics_selectors.FINISHED_STATES
            and latest.result not in diagnostics_selectors.PASSING
        ):
            per_gpu[gpu.pk] = FAIL
        elif request:
            wanted.append(gpu)
            per_gpu[gpu.pk] = PENDING
        else:  # expired, or passed on another driver: waiting ends here (run one from the GPU's page)
            per_gpu[gpu.pk] = UNKNOWN
        if latest is not None:
            detail.update(
                diagnostic=str(latest.diagnostic_id), level=latest.diagnostic.level, state=state,
                result=latest.result, driver=latest.diagnostic.driver_version,
            )  # fmt: skip
        details.append(detail)
    requested = None
    if wanted:
        requested = diagnostics.diagnostic_request(
            host=run.host, level=settings.RETURN_TO_SERVICE_LEVEL, gpus=wanted, user=user,
            purpose=Purpose.RETURN, now=now,
        )  # fmt: skip
        for detail in details:
            if any(gpu.uuid == detail["uuid"] for gpu in wanted):
                detail.update(diagnostic=str(requested.pk), level=requested.level, state=requested.state, result="")
    outcome = _combine(per_gpu)
    summary = {
        PASS: messages.DIAGNOSTIC_PASS(),
        FAIL: messages.DIAGNOSTIC_FAIL(),
        PENDING: messages.DIAGNOSTIC_PENDING(),
        UNKNOWN: messages.DIAGNOSTIC_UNKNOWN(),
    }[outcome]
    p = {"level": settings.RETURN_TO_SERVICE_LEVEL}
    return _result(outcome, _evidence(summary, p, details, per_gpu, run.started_at, now), summary)


def diagnostic_passed(*, item, run, gpus, now) -> AutoResult:
    return diagnostic_passed_judge(run=run, item=item, gpus=gpus, now=now, request=True, user=run.started_by)


# How a pending item is judged again by the beat task (services.verifications_finish).
JUDGES = {"cleaning_effect": cleaning_effect_judge, "diagnostic_passed": diagnostic_passed_judge}


def _evidence(summary: Said, p, details, per_gpu, start, end) -> dict:
    return {
        "summary": str(summary),
        "params": p,
        "window": [start.isoformat(), end.isoformat()],
        "gpus": details,
        "failed_gpu_ids": [gpu_id for gpu_id, outcome in per_gpu.items() if outcome == FAIL],
    }


CHECKS = {
    "idle_temperature": idle_temperature,
    "ecc_clean": ecc_clean,
    "fans_respond": fans_respond,
    "recent_backup": recent_backup,
    "cleaning_effect": cleaning_effect,
    "diagnostic_passed": diagnostic_passed,
}


def auto_check_run(*, run, gpus, now) -> dict[str, AutoResult]:
    """Every automatic item of the run, judged now (the cleaning check: pending, usually)."""
    results = {}
    for item in run.items:
        if item["kind"] != "auto":
            continue
        check = CHECKS.get(item.get("auto_check") or "")
        if check is None:
            summary = messages.UNKNOWN_CHECK()
            results[item["key"]] = _result(UNKNOWN, {"summary": str(summary)}, summary)
            continue
        if item["auto_check"] == "cleaning_effect":
            # The run is not completed yet: "after" starts now.
            run.completed_at = now
        results[item["key"]] = check(item=item, run=run, gpus=gpus, now=now)
    return results
