"""Reading the wear meters: any period of one GPU, lifetime totals, monthly figures, thermal
resistance, and the fleet ranking.

A period [from, to) is answered from three parts, in time order:
- the whole hours inside it, from the stored hour rows (sums added, busy streak segments
  composed, cycles replayed over the stored turning points — with a short cut: once the period's
  hysteresis state equals the stored lifetime state at the end of an hour, the rest of the
  period's cycles are the difference of the stored cumulative counts);
- the partial hours at `from` and `to` (when not on the hour), recomputed from the raw readings
  of that hour when they are all still kept (their count matches the hour row's) — exact;
  past raw retention, the hour row's figures prorated by the share of the hour in the period and
  its turning points filtered by time (the one approximation, documented in docs/wear.md).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Max, Min, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext_lazy

from portal.fleet import care
from portal.fleet import selectors as fleet_selectors
from portal.telemetry import store
from portal.wear import hours, meters
from portal.wear.meters import Bucket, Hysteresis, Streak
from portal.wear.models import WearDay, WearState

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Gpu

# no datetime column: parsing 8,760 timestamps costs more than everything else together
MIDDLE_COLUMNS = ("id", "powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj", "busy_prefix_s",
                  "busy_suffix_s", "busy_longest_s", "busy_unbroken", "cycles_high", "cycles_ref",
                  "cycles_total")  # fmt: skip
# rows of turning points fetched at a time: the replay usually stops in the first row or two, and a
# packed day's are unpacked to be read, so the first fetch is small
TURNS_FIRST, TURNS_CHUNK = 3, 48


@dataclass
class WearFigures:
    powered_hours: float = 0.0
    busy_hours: float = 0.0
    hot_hours: float = 0.0
    fan_high_hours: float = 0.0
    longest_busy_hours: float = 0.0
    thermal_cycles: int = 0
    energy_kwh: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _epoch_dt(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _edge(gpu: Gpu, hot_c: float, hour: int, start: float, end: float) -> tuple[Bucket, list[float]]:
    """Meters and temperatures of readings with start <= ts < end, all inside `hour`."""
    # raw or compressed alike: a period's edge hour may be older than the day readings stay raw
    readings = store.readings_of(
        gpu_ids=[gpu.pk], columns=meters.READING_FIELDS, start=_epoch_dt(start - meters.MAX_GAP_S), end=_epoch_dt(end),
        epoch=True,
    )  # fmt: skip
    raw_in_hour = sum(store.hour_counts([(gpu.pk, _epoch_dt(hour), _epoch_dt(hour + 3600))]).values())
    stored = next(iter(hours.hours_read({gpu.pk: (hour, hour + 1)})), None)
    if stored is None or raw_in_hour >= stored.readings:
        return meters.figures_over(readings, None, hot_c, start, end)
    # Raw readings pruned: the stored hour, prorated (documented approximation).
    share = (end - start) / 3600
    bucket = Bucket(
        powered_s=stored.powered_s * share, busy_s=stored.busy_s * share, hot_s=stored.hot_s * share,
        fan_high_s=stored.fan_high_s * share, energy_mj=stored.energy_mj * share,
        streak=Streak(stored.busy_prefix_s, stored.busy_suffix_s, stored.busy_longest_s,
                      stored.busy_unbroken).scaled(share),
    )  # fmt: skip
    temps = [temp for offset, temp in stored.turns if start <= hour + offset < end]
    return bucket, temps


DAY_S = 86400


def _days(gpu: Gpu, lo: float, hi: float):
    """Day rows with lo <= day < hi in time order, as MIDDLE_COLUMNS, and how to get their turning
    points by id (no query for an empty range)."""
    if lo >= hi:
        return hours.day_turns, []
    queryset = WearDay.objects.filter(gpu_id=gpu.pk)
    if not math.isinf(lo):
        queryset = queryset.filter(day__gte=_epoch_dt(lo))
    if not math.isinf(hi):
        queryset = queryset.filter(day__lt=_epoch_dt(hi))
    return hours.day_turns, list(queryset.order_by("day").values_list(*MIDDLE_COLUMNS))


def _hours(gpu: Gpu, lo: float, hi: float):
    """Hour rows with lo <= hour < hi (raw or packed, hours.py) as _days gives day rows, their
    position standing for the id."""
    if lo >= hi:
        return None, []
    found = hours.hours_read({gpu.pk: (lo, hi)})
    rows = [(position, *(getattr(row, name) for name in MIDDLE_COLUMNS[1:])) for position, row in enumerate(found)]
    return (lambda ids: {position: found[position].turns for position in ids}), rows


def wear_for_period(*, gpu: Gpu, start: dt.datetime | None = None, end: dt.datetime | None = None) -> WearFigures:
    hot_c = meters.hot_threshold(gpu.temp_slowdown_c)
    lo = start.timestamp() if start else -math.inf
    hi = end.timestamp() if end else math.inf
    if lo >= hi:
        return WearFigures()
    full_lo = lo if math.isinf(lo) else math.ceil(lo / 3600) * 3600
    full_hi = hi if math.isinf(hi) else math.floor(hi / 3600) * 3600
    parts: list[tuple[str, object]] = [("none", None)]
    if not math.isinf(lo) and lo % 3600:
        hour = meters.hour_of(lo)
        parts.append(("edge", _edge(gpu, hot_c, hour, lo, min(hi, hour + 3600))))
    if full_lo < full_hi:
        day_lo = full_lo if math.isinf(full_lo) else math.ceil(full_lo / DAY_S) * DAY_S
        day_hi = full_hi if math.isinf(full_hi) else math.floor(full_hi / DAY_S) * DAY_S
        if day_lo < day_hi:
            parts.append(("rows", _hours(gpu, full_lo, day_lo)))
            parts.append(("rows", _days(gpu, day_lo, day_hi)))
            parts.append(("rows", _hours(gpu, day_hi, full_hi)))
        else:
            parts.append(("rows", _hours(gpu, full_lo, full_hi)))
    first_edge_to = parts[-1][0] == "edge" and min(hi, meters.hour_of(lo) + 3600)
    if not math.isinf(hi) and hi % 3600 and first_edge_to != hi:
        hour = meters.hour_of(hi)
        parts.append(("edge", _edge(gpu, hot_c, hour, hour, hi)))

    total = Bucket()
    streak: Streak | None = None
    cycles = Hysteresis()
    for kind, part in parts:
        if kind == "none":
            continue
        if kind == "edge":
            bucket, temps = part
            for name in ("powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj"):
                setattr(total, name, getattr(total, name) + getattr(bucket, name))
            streak = bucket.streak if streak is None else streak.then(bucket.streak)
            cycles_over(temps, cycles)
            continue
        turns_of, rows = part
        if not rows:
            continue
        powered = busy = hot = fan = energy = 0.0
        # the busy streak segments composed inline (Streak.then, without an object per hour)
        prefix = suffix = longest = 0.0
        unbroken = True
        for row in rows:
            powered += row[1]
            busy += row[2]
            hot += row[3]
            fan += row[4]
            energy += row[5]
            if suffix + row[6] > longest:
                longest = suffix + row[6]
            if row[8] > longest:
                longest = row[8]
            if unbroken:
                prefix += row[6]
            suffix = suffix + row[7] if row[9] else row[7]
            unbroken = unbroken and row[9]
        total.powered_s += powered
        total.busy_s += busy
        total.hot_s += hot
        total.fan_high_s += fan
        total.energy_mj += energy
        segment = Streak(prefix, suffix, longest, unbroken)
        streak = segment if streak is None else streak.then(segment)
        _middle_cycles(turns_of, rows, cycles)
    return WearFigures(
        powered_hours=total.powered_s / 3600,
        busy_hours=total.busy_s / 3600,
        hot_hours=total.hot_s / 3600,
        fan_high_hours=total.fan_high_s / 3600,
        longest_busy_hours=(streak.longest if streak else 0.0) / 3600,
        thermal_cycles=cycles.count,
        energy_kwh=total.energy_mj / meters.MJ_PER_KWH,
    )


def cycles_over(temps, cycles: Hysteresis) -> None:
    for temp in temps:
        cycles.push(temp)


def _middle_cycles(turns_of, rows: list[tuple], cycles: Hysteresis) -> None:
    """Replay the middle hours' turning points until the period's state meets the lifetime one."""
    last = rows[-1]
    position, size = 0, TURNS_FIRST
    while position < len(rows):
        chunk = rows[position : position + size]
        turns = turns_of([row[0] for row in chunk])
        for row in chunk:
            for _, temp in turns[row[0]]:
                cycles.push(temp)
            if cycles.ref is not None and (cycles.high, cycles.ref) == (row[10], row[11]):
                # From here the period counts what the lifetime count counts.
                cycles.count += last[12] - row[12]
                cycles.high, cycles.ref = last[10], last[11]
                return
        position, size = position + size, TURNS_CHUNK


# --- pages -----------------------------------------------------------------------------------


def wear_lifetime(*, gpu: Gpu) -> dict:
    state = WearState.objects.filter(gpu=gpu).first()
    if state is None:
        return {"powered_hours": 0.0, "busy_hours": 0.0, "hot_hours": 0.0, "fan_high_hours": 0.0,
                "thermal_cycles": 0, "energy_kwh": 0.0, "since": None}  # fmt: skip
    return {
        "powered_hours": state.powered_s / 3600,
        "busy_hours": state.busy_s / 3600,
        "hot_hours": state.hot_s / 3600,
        "fan_high_hours": state.fan_high_s / 3600,
        "thermal_cycles": state.cycles_total,
        "energy_kwh": state.energy_mj / meters.MJ_PER_KWH,
        "since": state.first_hour,
    }


def wear_monthly(*, gpu: Gpu) -> list[dict]:
    """Per calendar month (UTC): hours powered, busy, hot, fan-high, and energy. Cycles per month
    are the lifetime count's growth over the month. Summed here in day order: a database's SUM of
    floats adds in whatever order the rows lie, which moves as rows are rewritten."""
    rows = WearDay.objects.filter(gpu=gpu).order_by("day").values_list(
        "day", "powered_s", "busy_s", "hot_s", "fan_high_s", "energy_mj", "cycles_total"
    )  # fmt: skip
    months: dict[str, list] = {}
    for day, *sums, cycles in rows:
        month = months.setdefault(day.strftime("%Y-%m"), [0.0, 0.0, 0.0, 0.0, 0.0, cycles])
        for position, value in enumerate(sums):
            month[position] += value
        month[5] = max(month[5], cycles)
    out = []
    previous_end = 0
    for month, (powered, busy, hot, fan, energy, cycles_end) in months.items():
        out.append({
            "month": month, "powered_hours": powered / 3600, "busy_hours": busy / 3600, "hot_hours": hot / 3600,
            "fan_high_hours": fan / 3600, "energy_kwh": energy / meters.MJ_PER_KWH,
            "thermal_cycles": cycles_end - previous_end,
        })  # fmt: skip
        previous_end = cycles_end
    return out


def thermal_resistance_daily(*, gpu: Gpu) -> list[dict]:
    """(mean temperature − 25 °C) / mean power over busy readings, per day: dust raises it."""
    rows = (
        WearDay.objects.filter(gpu=gpu, load_n__gt=0)
        .values_list("day", "load_n", "load_temp_sum", "load_power_sum")
        .order_by("day")
    )
    return [
        {"day": day.date().isoformat(), "c_per_w": round((t / n - meters.LOAD_REF_C) / (p / n), 5), "samples": n}
        for day, n, t, p in rows
        if p > 0
    ]


# --- the fleet ranking ---------------------------------------------------------------------------

SCORE_METERS = (
    ("hot_hours", "hot_s", 3600),
    ("thermal_cycles", "cycles_total", 1),
    ("busy_hours", "busy_s", 3600),
    ("fan_high_hours", "fan_high_s", 3600),
)
SCORE_DOC = gettext_lazy(
    "Wear score = the sum, over hot hours, thermal cycles, busy hours, fan-high hours and age (days in "
    "service), of the GPU's figure divided by the fleet's median of that figure (the medians over GPUs with "
    "readings; a meter whose median is 0 counts its figure, capped at 5). A typical GPU scores about 5; twice "
    "the fleet on every meter, about 10. 'Inspect first': the highest scores above 1.5 × the median score of the "
    "GPUs with readings. A GPU that never sent a reading has no score (its age alone says nothing of its wear)."
)
INSPECT_FACTOR = 1.5
INSPECT_MAX = 5


def _age_days(gpu: Gpu, state_first: dt.datetime | None, now: dt.datetime) -> float:
    started = None
    if gpu.install_date:
        started = dt.datetime.combine(gpu.install_date, dt.time(), tzinfo=dt.UTC)
    elif state_first:
        started = state_first
    else:
        started = gpu.created_at
    return max(0.0, (now - started).total_seconds() / 86400)


def _ratio(value: float, median: float) -> float:
    if median > 0:
        return value / median
    return min(value, 5.0) if value > 0 else 0.0


def fleet_wear_ranking(*, now: dt.datetime | None = None) -> dict:
    """Every GPU (not retired) with its lifetime meters and wear score, highest first: constant
    queries whatever the fleet size."""
    now = now or timezone.now()
    gpus = list(
        fleet_selectors.gpus()
        .exclude(status="retired")
        .select_related("host", "wear")
        .order_by("host__hostname", "index")
    )
    last_cleaning = dict(
        fleet_selectors.records()
        .filter(kind="cleaning")
        .values("host_id")
        .annotate(last=Max("performed_at"))
        .values_list("host_id", "last")
    )
    rows = []
    for gpu in gpus:
        state = getattr(gpu, "wear", None)
        figures = {name: (getattr(state, column) / scale if state else 0.0) for name, column, scale in SCORE_METERS}
        figures["age_days"] = _age_days(gpu, state.first_hour if state else None, now)
        rows.append({"gpu": gpu, "figures": figures, "last_cleaning": last_cleaning.get(gpu.host_id)})
    names = [m[0] for m in SCORE_METERS] + ["age_days"]
    # GPUs that never sent a reading (spares, new cards) do not define what is typical
    metered = [r for r in rows if getattr(r["gpu"], "wear", None) is not None] or rows
    medians = {name: statistics.median([r["figures"][name] for r in metered]) if metered else 0.0 for name in names}
    for row in rows:
        row["parts"] = {name: _ratio(row["figures"][name], medians[name]) for name in names}
        # A GPU that never sent a reading has no wear to score: its age alone would rank an old spare
        # above every working GPU. It is listed last, "no readings", and never to inspect first.
        row["readings"] = getattr(row["gpu"], "wear", None) is not None
        row["score"] = round(sum(row["parts"].values()), 2) if row["readings"] else None
    rows.sort(key=lambda r: (r["score"] is None, -(r["score"] or 0), r["gpu"].host.hostname, r["gpu"].index))
    # the typical score, like the typical figures, of the GPUs with readings
    scored = [r["score"] for r in rows if r["score"] is not None]
    median_score = round(statistics.median(scored), 2) if scored else 0.0
    inspect = [
        r for r in rows if r["score"] is not None and r["score"] > INSPECT_FACTOR * median_score and r["score"] > 0
    ][:INSPECT_MAX]
    return {"rows": rows, "medians": medians, "median_score": median_score, "inspect_first": inspect,
            "score_doc": SCORE_DOC}  # fmt: skip


def wear_lifetime_all() -> list[tuple]:
    """(gpu uuid, hostname, hot_s, busy_s, cycles, energy_mj) for every GPU with meters: one query."""
    return list(
        WearState.objects.values_list(
            "gpu__uuid", "gpu__host__hostname", "hot_s", "busy_s", "cycles_total", "energy_mj"
        ).order_by("gpu__host__hostname", "gpu__index")
    )


def _meters_spans(host_ids: list[int], since: dict[int, dt.datetime]) -> tuple[dict, dict, dict]:
    """Per GPU of the hosts: the hours of the day `since` falls in from its hour on (a partial day,
    read hour by hour), the first whole day after it (read from the day rows), and its host."""
    partial, whole, host_of = {}, {}, {}
    for gpu_id, host_id in fleet_selectors.gpus().filter(host_id__in=host_ids).values_list("pk", "host_id"):
        host_of[gpu_id] = host_id
        moment = since.get(host_id)
        lo = -math.inf if moment is None else meters.hour_of(moment.timestamp())
        whole[gpu_id] = lo if math.isinf(lo) or lo % DAY_S == 0 else lo - lo % DAY_S + DAY_S
        if whole[gpu_id] > lo:
            partial[gpu_id] = (lo, whole[gpu_id])
    return partial, whole, host_of


def meters_since(*, host_ids: list[int], since: dict[int, dt.datetime]) -> dict[int, dict[str, float]]:
    """Per host: the largest busy, fan-high hours and thermal cycles of any of its GPUs since
    `since[host_id]` (whole hours from that time's hour on; the cycles counted after the first of
    them). For usage-based schedules. The rest of the first day is read hour by hour, raw or packed
    alike (hours.py), the whole days after it from the day rows (sums of their hours)."""
    out: dict[int, dict[str, float]] = {host_id: {"busy_hours": 0.0, "fan_high_hours": 0.0, "thermal_cycles": 0}
                                        for host_id in host_ids}  # fmt: skip
    if not host_ids:
        return out
    partial, whole, host_of = _meters_spans(host_ids, since)
    figures: dict[int, list] = {}  # gpu_id: [busy_s, fan_high_s, first hour's cycles, last hour's]
    for row in hours.hours_read(partial):
        entry = figures.setdefault(row.gpu_id, [0.0, 0.0, row.cycles_total, 0])
        entry[0] += row.busy_s
        entry[1] += row.fan_high_s
        entry[3] = row.cycles_total
    condition = Q(pk__in=[])
    for gpu_id, lo in whole.items():
        condition |= Q(gpu_id=gpu_id) if math.isinf(lo) else Q(gpu_id=gpu_id, day__gte=_epoch_dt(lo))
    days = list(
        WearDay.objects.filter(condition)
        .values("gpu_id")
        .annotate(busy=Sum("busy_s"), fan=Sum("fan_high_s"), cmax=Max("cycles_total"), first=Min("day"))
        .values_list("gpu_id", "busy", "fan", "cmax", "first")
    )
    # a GPU with no hour in its partial day: the cycles count from its first day row's first hour
    starts = {gpu_id: first.timestamp() for gpu_id, _, _, _, first in days if gpu_id not in figures}
    first_hours = {}
    for row in hours.hours_read({gpu_id: (start, start + DAY_S) for gpu_id, start in starts.items()}):
        first_hours.setdefault(row.gpu_id, row.cycles_total)
    for gpu_id, busy, fan, cmax, _ in days:
        entry = figures.setdefault(gpu_id, [0.0, 0.0, first_hours.get(gpu_id, cmax), 0])
        entry[0] += busy
        entry[1] += fan
        entry[3] = cmax
    for gpu_id, (busy, fan, first, last) in figures.items():
        host = out[host_of[gpu_id]]
        host["busy_hours"] = max(host["busy_hours"], busy / 3600)
        host["fan_high_hours"] = max(host["fan_high_hours"], fan / 3600)
        host["thermal_cycles"] = max(host["thermal_cycles"], last - first)
    return out


def gpu_wear_panel(*, gpu: Gpu) -> dict:
    """The GPU page's Wear panel: lifetime totals, monthly figures, thermal resistance per day and
    the cleanings (its own and its host's) to mark on that chart. Four queries."""
    cleanings = (
        fleet_selectors.records()
        .filter(kind="cleaning", host_id=gpu.host_id)
        .filter(Q(gpu__isnull=True) | Q(gpu_id=gpu.pk))
        .order_by("performed_at")
        .values_list("performed_at", flat=True)
    )
    return {
        "lifetime": wear_lifetime(gpu=gpu),
        "limits": {
            "hot_margin_c": care.WEAR_HOT_MARGIN_C,
            "busy_util_pct": meters.BUSY_UTIL_PCT,
            "fan_high_pct": meters.FAN_HIGH_PCT,
            "cycle_c": meters.CYCLE_C,
        },  # fmt: skip
        "chart": {
            "monthly": wear_monthly(gpu=gpu),
            "resistance": thermal_resistance_daily(gpu=gpu),
            "cleanings": [moment.date().isoformat() for moment in cleanings],
        },
    }
