"""The wear meters' arithmetic, exactly as `portal-api-v1.md` ("Wear") defines them; no Django.

A reading *covers* the time since the previous reading of its GPU (by `ts`) when that gap is at
most `MAX_GAP_S`; everything counted per pair belongs to the later reading's `ts` (and so to the
hour bucket of that reading). Per hour the portal keeps what is needed to answer any period:

- sums: powered, busy, hot, fan-high seconds and energy (mJ);
- the busy streak as a segment summary (busy seconds before the first break, after the last
  break, the longest run inside, and whether nothing broke it), which composes exactly across
  hours (`Streak.then`);
- the hour's temperatures reduced to the points that decide the thermal-cycle hysteresis
  (`Turns`): consecutive points on a monotone run collapse to its ends, and an inner pair that
  swings less than `CYCLE_C` and lies within its neighbours' range is dropped. Neither changes
  the hysteresis' state or count for *any* incoming state (proof sketch in `Turns.push`), so a
  period's cycles are the hysteresis over the concatenated turning points of its hours — exact.
- the lifetime hysteresis state at the end of the hour (mode, reference, cumulative count),
  which lets a long period stop replaying once its own state has met the lifetime one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from portal.fleet import care
from portal.telemetry import metrics
from portal.telemetry.columns import ReadingColumns

MAX_GAP_S = 120.0
BUSY_UTIL_PCT = 90
FAN_HIGH_PCT = 80
CYCLE_C = 30.0
LOAD_REF_C = 25.0  # thermal resistance: (T - 25 °C) / P over busy readings
MJ_PER_KWH = 3.6e9

# A reading as the meters read it: (ts epoch s, temperature, fan speed, power, energy, GPU utilisation)
READING_FIELDS = ReadingColumns("ts", *(metric.name for metric in (
    metrics.TEMPERATURE, metrics.FAN, metrics.POWER, metrics.ENERGY, metrics.UTILIZATION_GPU,
))).names  # fmt: skip
TS, TEMP, FAN, POWER, ENERGY, UTIL = range(len(READING_FIELDS))


def hot_threshold(temp_slowdown_c: int | None) -> float:
    return care.wear_hot_c(temp_slowdown_c)


def hour_of(ts: float) -> int:
    return int(ts // 3600) * 3600


# --- the busy streak as a composable segment -------------------------------------------------


@dataclass(slots=True)
class Streak:
    """Busy coverage of a run of pairs: `prefix` before the first break, `suffix` after the last,
    `longest` run anywhere inside, `unbroken` when no pair broke it (then prefix == suffix == all)."""

    prefix: float = 0.0
    suffix: float = 0.0
    longest: float = 0.0
    unbroken: bool = True

    def add(self, busy_s: float | None) -> None:
        """One pair: busy coverage of `busy_s` seconds, or None for a break (gap, non-busy reading)."""
        if busy_s is None:
            self.unbroken = False
            self.suffix = 0.0
            return
        if self.unbroken:
            self.prefix += busy_s
        self.suffix += busy_s
        self.longest = max(self.longest, self.suffix)

    def then(self, other: Streak) -> Streak:
        return Streak(
            prefix=self.prefix + other.prefix if self.unbroken else self.prefix,
            suffix=other.suffix + self.suffix if other.unbroken else other.suffix,
            longest=max(self.longest, other.longest, self.suffix + other.prefix),
            unbroken=self.unbroken and other.unbroken,
        )

    def scaled(self, factor: float) -> Streak:
        return Streak(self.prefix * factor, self.suffix * factor, self.longest * factor, self.unbroken)


# --- thermal cycles ----------------------------------------------------------------------------


@dataclass(slots=True)
class Hysteresis:
    """The contract's cycle counter: start low at the first temperature; low tracks the minimum
    and counts a cycle (turning high) at +30 °C; high tracks the maximum and turns low at -30 °C."""

    high: bool = False
    ref: float | None = None
    count: int = 0

    def push(self, temp: float) -> None:
        if self.ref is None:
            self.ref = temp
        elif not self.high:
            if temp >= self.ref + CYCLE_C:
                self.count += 1
                self.high, self.ref = True, temp
            elif temp < self.ref:
                self.ref = temp
        elif temp <= self.ref - CYCLE_C:
            self.high, self.ref = False, temp
        elif temp > self.ref:
            self.ref = temp

    def state(self) -> tuple[bool, float | None]:
        return self.high, self.ref


class Turns:
    """An hour's temperatures (offset in the hour, °C) reduced to the points that decide the
    hysteresis for any incoming state.

    - Monotone run a ≤ b ≤ c: b changes nothing that c does not (the low minimum is already at
      most a, a trigger at b implies one at c, and the high maximum ends at c) — drop b.
    - Alternating p0, p1, p2, p3 with p1, p2 inside [min(p0, p3), max(p0, p3)] and |p1 - p2| < 30:
      after p1 the counter cannot turn back at p2 (less than 30 below a maximum ≥ p1 … or ≥ p0
      above the minimum), and p3 reaches at least as far as p1 did — drop p1 and p2.
    The first point is always kept (a period may start there: "low at its first temperature").
    """

    __slots__ = ("points",)

    def __init__(self, points: list | None = None):
        self.points: list[list] = [list(p) for p in points] if points else []

    def push(self, offset: float, temp: float) -> None:
        pts = self.points
        n = len(pts)
        if n >= 2:
            a, b = pts[-2][1], pts[-1][1]
            if (a <= b <= temp) or (a >= b >= temp):
                # the usual case: the run goes on, b is no longer a turning point; the last point
                # moved, so the pair rule below may apply again
                pts[-1] = [offset, temp]
                if n < 4:
                    return
                p0, p1, p2, p3 = pts[-4][1], pts[-3][1], pts[-2][1], temp
                if abs(p1 - p2) >= CYCLE_C or min(p1, p2) < min(p0, p3) or max(p1, p2) > max(p0, p3):
                    return
                self._reduce()
                return
        pts.append([offset, temp])
        self._reduce()

    def _reduce(self) -> None:
        pts = self.points
        while True:
            n = len(pts)
            if n >= 3:
                a, b, c = pts[-3][1], pts[-2][1], pts[-1][1]
                if (a <= b <= c) or (a >= b >= c):  # b is never the first point (a is before it)
                    del pts[-2]
                    continue
            if n >= 4:
                p0, p1, p2, p3 = (p[1] for p in pts[-4:])
                low, high = min(p0, p3), max(p0, p3)
                if abs(p1 - p2) < CYCLE_C and low <= min(p1, p2) and max(p1, p2) <= high:
                    del pts[-3:-1]
                    continue
            return


def cycles_over(temps, start: Hysteresis | None = None) -> Hysteresis:
    h = start or Hysteresis()
    for temp in temps:
        h.push(temp)
    return h


# --- one hour's (or one stretch's) meters -----------------------------------------------------


@dataclass(slots=True)
class Bucket:
    powered_s: float = 0.0
    busy_s: float = 0.0
    hot_s: float = 0.0
    fan_high_s: float = 0.0
    energy_mj: float = 0.0
    streak: Streak = field(default_factory=Streak)
    turns: Turns = field(default_factory=Turns)
    readings: int = 0
    load_n: int = 0
    load_temp_sum: float = 0.0
    load_power_sum: float = 0.0


def pair_into(bucket: Bucket, prev: tuple | None, cur: tuple, hot_c: float, hour: int | None = None) -> None:
    """Count the pair (prev, cur) into cur's bucket (of `hour`, cur's hour), and cur's own
    temperature and load. Called once per reading: kept to plain locals."""
    ts, temp, fan, power, energy, util = cur
    bucket.readings += 1
    busy = util is not None and util >= BUSY_UTIL_PCT
    gap = None if prev is None else ts - prev[TS]
    if gap is not None and 0 <= gap <= MAX_GAP_S:
        bucket.powered_s += gap
        if busy:
            bucket.busy_s += gap
        if temp is not None and temp >= hot_c:
            bucket.hot_s += gap
        if fan is not None and fan >= FAN_HIGH_PCT:
            bucket.fan_high_s += gap
        if prev[ENERGY] is not None and energy is not None:
            rise = energy - prev[ENERGY]
            bucket.energy_mj += rise if rise >= 0 else energy
        elif power is not None:
            bucket.energy_mj += power * gap * 1000.0
        bucket.streak.add(gap if busy else None)
    else:
        bucket.streak.add(None)
    if temp is not None:
        bucket.turns.push(ts - (hour_of(ts) if hour is None else hour), float(temp))
        if busy and power:
            bucket.load_n += 1
            bucket.load_temp_sum += temp
            bucket.load_power_sum += power


def buckets_from(
    readings, prev: tuple | None, hot_c: float, into: dict[int, Bucket] | None = None
) -> dict[int, Bucket]:
    """Readings in `ts` order (after `prev`, the reading before them, or None) into hour buckets."""
    out = into if into is not None else {}
    hour = end = None
    bucket = None
    for cur in readings:
        ts = cur[TS]
        if end is None or not hour <= ts < end:
            hour = hour_of(ts)
            end = hour + 3600
            bucket = out.get(hour)
            if bucket is None:
                bucket = out[hour] = Bucket()
        pair_into(bucket, prev, cur, hot_c, hour)
        prev = cur
    return out


def figures_over(readings, prev: tuple | None, hot_c: float, start: float, end: float) -> tuple[Bucket, list[float]]:
    """The meters of readings with start <= ts < end (pairs reaching back to `prev` or earlier
    readings in the list), and the temperatures of those readings in order (for the cycles)."""
    total = Bucket()
    temps = []
    for cur in readings:
        if cur[TS] >= end:
            break
        if cur[TS] >= start:
            pair_into(total, prev, cur, hot_c)
            if cur[TEMP] is not None:
                temps.append(float(cur[TEMP]))
        prev = cur
    return total, temps
