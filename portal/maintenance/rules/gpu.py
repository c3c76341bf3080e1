"""Rules judged on each batch of readings, one GPU at a time.

Each rule's docstring says what it watches, when it opens and clears, and why; the recommended
actions put the maintenance practices of shared/seed/gpu-wear-and-maintenance into words a
technician can act on.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.fleet import care
from portal.maintenance import messages
from portal.telemetry import metrics
from portal.telemetry.selectors import THERMAL_THROTTLE_MASK

from .base import (
    ECC_CORR,
    ECC_UNCORR,
    ECC_UNCORR_AGG,
    FAN,
    FIRING,
    PCIE_GEN,
    PCIE_REPLAY,
    PCIE_WIDTH,
    POWER,
    POWER_LIMIT,
    REMAP_FAILURE,
    REMAP_PENDING,
    RETIRED_PENDING,
    SM_CLOCK,
    TEMP,
    THROTTLE,
    TS,
    UTIL,
    Drift,
    Event,
    Rule,
    rate_per,
    step,
    window_add,
)


def _evidence(rows, upto, column, limit=30):
    """The readings that fired a rule: the last `limit` values of `column` up to the firing one."""
    return lambda: [[row[TS], row[column]] for row in rows[max(0, upto - limit + 1) : upto + 1]]


class Overheat(Rule):
    __doc__ = gettext_noop(
        "Temperature at or above (slowdown threshold − 5 °C; 83 °C when the GPU does not report a "
        "threshold) for 2 minutes opens; below (threshold − 12 °C) for 10 minutes clears. Reaching the "
        "slowdown threshold itself escalates the ticket to critical."
    )

    key = "overheat"
    title = gettext_noop("GPU overheating")
    watches = gettext_noop("temperature")
    metric = metrics.TEMPERATURE.name
    unit = "°C"
    action = gettext_noop(
        "Check the airflow around the server: blocked intakes, failed rack or room cooling, a missing blanking panel. "
        "Clean dust from the heatsink and fans, and check the fans spin. Reduce the load until the temperature is "
        "back below the threshold."
    )
    resolved_by = ("cleaning",)
    defaults = {
        "open_margin_c": care.OVERHEAT_MARGIN_C, "clear_margin_c": care.OVERHEAT_CLEAR_MARGIN_C,
        "unknown_slowdown_c": care.UNKNOWN_SLOWDOWN_C, "open_for_s": 120, "clear_for_s": 600, "max_gap_s": 300,
    }  # fmt: skip

    @staticmethod
    def open_at_c(*, slowdown_c: int | None, params: dict) -> float:
        """The temperature from which the rule opens (the pages' "hot")."""
        return care.below_slowdown_c(
            slowdown_c, margin_c=params["open_margin_c"], unknown_c=params["unknown_slowdown_c"]
        )

    def evaluate(self, track, gpu, rows, p, emit):
        slowdown = care.slowdown_c(gpu.temp_slowdown_c, unknown_c=p["unknown_slowdown_c"])
        open_at, clear_below = self.open_at_c(slowdown_c=slowdown, params=p), slowdown - p["clear_margin_c"]
        escalated = track.data.get("esc", False)
        for i, row in enumerate(rows):
            temp = row[TEMP]
            if temp is None:
                continue
            step(track, row[TS], temp >= open_at, temp < clear_below, temp, p, emit, _evidence(rows, i, TEMP))
            if track.state == FIRING and temp >= slowdown and not escalated:
                escalated = track.data["esc"] = True
                emit(Event("update", track, row[TS], value=temp, severity="critical", note=messages.SLOWDOWN()))
            elif track.state == "ok" and escalated:
                escalated = track.data["esc"] = False


class ThermalThrottle(Rule):
    __doc__ = gettext_noop(
        # xgettext:no-python-format (a percentage, never formatted)
        "hw_thermal, sw_thermal or hw_slowdown active in more than 20 % of the readings of the last 10 "
        "minutes (with at least 9 minutes of readings) opens; at most 5 % for 10 minutes clears."
    )

    key = "thermal_throttle"
    value_text = gettext_noop("%(value)s %% of the readings throttled")
    title = gettext_noop("Thermal throttling")
    watches = gettext_noop("clock event reasons (hw_thermal, sw_thermal, hw_slowdown)")
    metric = metrics.SM_CLOCK.name
    unit = "%"
    action = gettext_noop(
        "The GPU slows itself down to survive the heat. Improve cooling first (clean dust, check fans and airflow), "
        "then check that power cables and the PSU are sound (hw_slowdown can also be a power brake)."
    )
    resolved_by = ("cleaning",)
    defaults = {
        "window_s": 600, "open_fraction": 0.20, "clear_fraction": 0.05, "min_coverage_s": 540, "clear_for_s": 600,
        "open_for_s": 0, "max_gap_s": 300,
    }  # fmt: skip

    def evaluate(self, track, gpu, rows, p, emit):
        buckets = track.data.setdefault("b", [])
        for i, row in enumerate(rows):
            mask = row[THROTTLE]
            if mask is None:
                continue
            fraction, covered = window_add(buckets, row[TS], bool(mask & THERMAL_THROTTLE_MASK), p["window_s"])
            opening = covered >= p["min_coverage_s"] and fraction > p["open_fraction"]
            step(track, row[TS], opening, fraction <= p["clear_fraction"], round(fraction * 100, 1), p, emit,
                 _evidence(rows, i, THROTTLE))  # fmt: skip
        track.changed = True


class FanWear(Rule):
    __doc__ = gettext_noop(
        "Three signs of a worn fan: the fan at ≥ 95 % while the temperature still climbs (3 °C above "
        "where it was when the fan reached 95 %); the fan reading 0 %, or stuck at one value for 30 "
        "minutes while the temperature moves by 10 °C, while the GPU is hot; and, over weeks, more fan "
        "duty needed at comparable load than in the first 7 days after the last fan replacement (+15 "
        "points at the same temperature). Any of them for 2 minutes opens; none for 30 minutes clears."
    )

    key = "fan_wear"
    value_text = gettext_noop("fan at %(value)s %%")
    title = gettext_noop("Fan wear")
    watches = gettext_noop("fan duty, temperature, power")
    metric = metrics.FAN.name
    unit = "%"
    action = gettext_noop(
        "Inspect the fan: listen for bearing noise, check it spins freely, clear dust from the blades and the "
        "heatsink. Replace the fan if it is stuck, noisy or needs full speed to hold a normal temperature."
    )
    resolved_by = ("fan_replacement", "cleaning")
    defaults = {
        "saturated_pct": 95, "climb_c": 3, "hot_c": care.FAN_WEAR_HOT_C, "stuck_for_s": 1800, "stuck_temp_range_c": 10,
        "drift_points": 15, "baseline_days": 7, "min_samples": 30, "load_util_pct": 80, "open_for_s": 120,
        "clear_for_s": 1800, "max_gap_s": 300,
    }  # fmt: skip

    def evaluate(self, track, gpu, rows, p, emit):
        d = track.data
        for i, row in enumerate(rows):
            fan, temp = row[FAN], row[TEMP]
            if fan is None or temp is None:
                continue
            ts = row[TS]
            climbing = False
            hot = temp >= p["hot_c"]
            if fan >= p["saturated_pct"] and hot:
                # Measured from when the GPU is hot with the fan flat out: a card warming up
                # under a fan curve that saturates early (overclocked, pinned fans) is not wear.
                base = d.setdefault("t95", temp)
                climbing = temp - base >= p["climb_c"]
            elif fan < p["saturated_pct"] and "t95" in d:
                del d["t95"]
            if d.get("sv") != fan:
                d["sv"], d["st"], d["lo"], d["hi"] = fan, ts, temp, temp
            else:
                d["lo"], d["hi"] = min(d["lo"], temp), max(d["hi"], temp)
            stuck = ts - d["st"] >= p["stuck_for_s"] and d["hi"] - d["lo"] >= p["stuck_temp_range_c"]
            dead = hot and (fan == 0 or stuck)
            util = row[UTIL]
            if util is not None and util >= p["load_util_pct"]:
                self._drift(d, ts, fan, temp, p)
            worn = d.get("worn", False)
            opening = climbing or dead or worn
            step(track, ts, opening, not opening, fan, p, emit, _evidence(rows, i, FAN))
            if dead and track.state == FIRING and not d.get("esc"):
                d["esc"] = True
                emit(Event("update", track, ts, value=fan, severity="critical", note=messages.FAN_STOPPED()))
        track.changed = True

    @staticmethod
    def _drift(d, ts, fan, temp, p):
        """Fan duty for the same temperature (5 °C bins) against the baseline days; the mean
        excess of each later day decides `worn`."""
        t0 = d.setdefault("t0", ts)
        bin_ = str(int(temp // 5))
        if ts - t0 < p["baseline_days"] * 86400:
            acc = d.setdefault("bins", {}).setdefault(bin_, [0, 0.0])
            acc[0] += 1
            acc[1] += fan
            return
        day = int(ts // 86400)
        if d.get("day") != day:
            cur = d.get("cur")
            if cur and cur[0] >= p["min_samples"]:
                d["worn"] = cur[1] / cur[0] >= p["drift_points"]
            d["day"], d["cur"] = day, [0, 0.0]
        base = d.get("bins", {}).get(bin_)
        if base and base[0] >= 5:
            d["cur"][0] += 1
            d["cur"][1] += fan - base[1] / base[0]


class CoolingDegradation(Rule):
    __doc__ = gettext_noop(
        # xgettext:no-python-format (a percentage, never formatted)
        "Dust: thermal resistance, (temperature − idle baseline) / power at comparable load (≥ 80 % "
        "utilisation), compared day by day against the first 7 days after the last cleaning. Up by ≥ 15 % "
        'opens "cleaning due", before any temperature alarm; back under +8 % for a day clears. Logging a '
        "cleaning resets the baseline (and resolves the ticket)."
    )

    key = "cooling_degradation"
    value_text = gettext_noop("thermal resistance +%(value)s %%")
    title = gettext_noop("Cooling degraded: cleaning due")
    watches = gettext_noop("thermal resistance (temperature over idle, per watt)")
    metric = metrics.TEMPERATURE.name
    unit = "%"
    action = gettext_noop(
        "Clean the GPU and the server: blow dust out of heatsink fins, fans and filters, check that the airflow path "
        "is free, and log the cleaning here (that sets a new baseline). Consider fresh thermal paste if cleaning "
        "does not bring the temperature back."
    )
    resolved_by = ("cleaning", "thermal_paste")
    defaults = {
        "rise_fraction": 0.15, "clear_fraction": 0.08, "baseline_days": 7, "load_util_pct": 80, "idle_util_pct": 5,
        "min_samples": 30, "open_for_s": 0, "clear_for_s": 0, "max_gap_s": 10**9,
    }  # fmt: skip

    def evaluate(self, track, gpu, rows, p, emit):
        d = track.data
        drift = d.setdefault("drift", {})
        for row in rows:
            temp, power, util = row[TEMP], row[POWER], row[UTIL]
            if temp is None or power is None or util is None:
                continue
            ts = row[TS]
            if util <= p["idle_util_pct"]:
                if ts - drift.get("t0", ts) < p["baseline_days"] * 86400:
                    idle = d.setdefault("idle", [0, 0.0])
                    idle[0] += 1
                    idle[1] += temp
                continue
            if util < p["load_util_pct"] or power <= 0:
                continue
            finished = Drift.add(drift, ts, (temp, power), p["baseline_days"])
            if finished is None:
                continue
            base, idle = drift["base"], d.get("idle")
            if base[0] < p["min_samples"] or finished[0] < p["min_samples"] or not idle or not idle[0]:
                continue
            idle_c = idle[1] / idle[0]
            r_base = (base[1] / base[0] - idle_c) / (base[2] / base[0])
            r_day = (finished[1] / finished[0] - idle_c) / (finished[2] / finished[0])
            if r_base <= 0:
                continue
            rise = r_day / r_base - 1
            d["rise"] = round(rise, 4)
            step(track, ts, rise >= p["rise_fraction"], rise < p["clear_fraction"], round(rise * 100, 1), p, emit)
        track.changed = True


class EccUncorrected(Rule):
    __doc__ = gettext_noop(
        "Any uncorrected ECC error (volatile count above 0, or the aggregate count going up) opens at "
        "once, critical. It does not clear by itself: a person decides after the reset."
    )

    key = "ecc_uncorrected"
    value_text = gettext_noop("%(value)s uncorrected errors")
    title = gettext_noop("Uncorrected ECC error")
    severity = "critical"
    watches = gettext_noop("ECC uncorrected (volatile, aggregate)")
    metric = metrics.ECC_UNCORRECTED_VOLATILE.name
    action = gettext_noop(
        "Memory returned data it could not correct: results of the running job may be wrong. Back up checkpoints, "
        "drain the GPU, reset it (nvidia-smi -r or reboot) and check retired pages / remapped rows. If errors come "
        "back, send the GPU for professional repair (RMA)."
    )
    resolved_by = ("repair",)
    defaults = {"open_for_s": 0, "clear_for_s": None}

    def evaluate(self, track, gpu, rows, p, emit):
        d = track.data
        for i, row in enumerate(rows):
            volatile, aggregate = row[ECC_UNCORR], row[ECC_UNCORR_AGG]
            grew = aggregate is not None and d.get("agg") is not None and aggregate > d["agg"]
            if aggregate is not None and aggregate != d.get("agg"):
                d["agg"] = aggregate
                track.changed = True
            bad = bool(volatile) or grew
            if bad or track.state != "ok":
                step(track, row[TS], bad, False, volatile or 1, p, emit, _evidence(rows, i, ECC_UNCORR))


class EccCorrectedRate(Rule):
    __doc__ = gettext_noop(
        "Corrected ECC errors growing faster than `max_per_day` (measured over at least an hour of "
        "readings) opens; below half that rate for 6 hours clears."
    )

    key = "ecc_corrected_rate"
    summary = gettext_noop(
        "Corrected ECC errors growing faster than the rule's limit per day (measured over at least an hour of "
        "readings) opens; below half that rate for 6 hours clears."
    )
    value_text = gettext_noop("%(value)s corrected errors a day")
    title = gettext_noop("Corrected ECC errors rising")
    watches = gettext_noop("ECC corrected (volatile) per day")
    metric = metrics.ECC_CORRECTED_VOLATILE.name
    unit = "/day"
    action = gettext_noop(
        "The memory is wearing: plan a maintenance window, back up checkpoints, reset the GPU and check for retired "
        "pages or remapped rows. Keep watching the rate; prepare an RMA if it keeps climbing."
    )
    resolved_by = ("repair",)
    defaults = {"max_per_day": 100, "min_window_s": 3600, "window_s": 6 * 3600, "open_for_s": 0,
                "clear_for_s": 6 * 3600, "max_gap_s": 3600}  # fmt: skip

    def evaluate(self, track, gpu, rows, p, emit):
        anchor = track.data.setdefault("w", {})
        for i, row in enumerate(rows):
            count = row[ECC_CORR]
            if count is None:
                continue
            rate = rate_per(anchor, row[TS], count, 86400, p["min_window_s"], p["window_s"])
            if rate is None:
                continue
            step(track, row[TS], rate > p["max_per_day"], rate < p["max_per_day"] / 2, round(rate, 1), p, emit,
                 _evidence(rows, i, ECC_CORR))  # fmt: skip
        track.changed = True


class MemoryPending(Rule):
    __doc__ = gettext_noop(
        "Retired pages or remapped rows pending: the fix is applied at the next GPU reset. Opens at once; "
        "clears when no flag is pending for 10 minutes (after the reset)."
    )

    key = "memory_pending"
    value_text = ""  # a flag
    title = gettext_noop("Memory repair pending: drain and reset")
    watches = gettext_noop("retired pages pending, remapped rows pending")
    metric = metrics.ECC_UNCORRECTED_VOLATILE.name
    action = gettext_noop(
        "Drain the jobs from this GPU and reset it (nvidia-smi -r, or reboot the host) so the pending page "
        "retirement / row remapping takes effect. Back up checkpoints first."
    )
    resolved_by = ("repair",)
    defaults = {"open_for_s": 0, "clear_for_s": 600, "max_gap_s": 3600}

    def evaluate(self, track, gpu, rows, p, emit):
        for row in rows:
            flags = (row[RETIRED_PENDING], row[REMAP_PENDING])
            if flags == (None, None):
                continue
            pending = any(flags)
            if pending or track.state != "ok":
                step(track, row[TS], pending, not pending, 1.0 if pending else 0.0, p, emit)


class RemapFailure(Rule):
    __doc__ = gettext_noop(
        "Row remapping failed: the memory cannot repair itself any more. Critical, never clears by "
        "itself; a repair record resolves it."
    )

    key = "remap_failure"
    value_text = ""  # a flag
    title = gettext_noop("Row remapping failed: RMA")
    severity = "critical"
    watches = gettext_noop("remapped rows failure")
    action = gettext_noop(
        "The GPU memory can no longer repair itself. Take the GPU out of service, back up what it held, and start "
        "an RMA / professional repair; log it as a repair record."
    )
    resolved_by = ("repair",)
    defaults = {"open_for_s": 0, "clear_for_s": None}

    def evaluate(self, track, gpu, rows, p, emit):
        for row in rows:
            if row[REMAP_FAILURE] or track.state != "ok":
                step(track, row[TS], bool(row[REMAP_FAILURE]), False, 1.0, p, emit)


class Pcie(Rule):
    __doc__ = gettext_noop(
        # xgettext:no-python-format (a percentage, never formatted)
        "PCIe link trained below the GPU's maximum generation or width while busy (≥ 50 % utilisation), "
        "or replay errors rising faster than `max_replays_per_h`, for 5 minutes opens; neither for 30 "
        "minutes clears."
    )

    key = "pcie"
    summary = gettext_noop(
        # xgettext:no-python-format (a percentage, never formatted)
        "PCIe link trained below the GPU's maximum generation or width while busy (≥ 50 % utilisation), "
        "or replay errors rising faster than the rule's limit per hour, for 5 minutes opens; neither for 30 "
        "minutes clears."
    )
    value_text = gettext_noop("link width x%(value)s")
    title = gettext_noop("PCIe link degraded")
    watches = gettext_noop("PCIe link generation and width, replay counter")
    metric = metrics.PCIE_LINK_WIDTH.name
    action = gettext_noop(
        "Check the seating of the GPU in its slot, the risers and the cables (power and PCIe); reseat and clean the "
        "contacts during a maintenance window, then log a connection check."
    )
    resolved_by = ("connection_check",)
    defaults = {"busy_util_pct": 50, "max_replays_per_h": 10, "open_for_s": 300, "clear_for_s": 1800,
                "max_gap_s": 300}  # fmt: skip

    def evaluate(self, track, gpu, rows, p, emit):
        anchor = track.data.setdefault("w", {})
        for i, row in enumerate(rows):
            gen, width, util, replays = row[PCIE_GEN], row[PCIE_WIDTH], row[UTIL], row[PCIE_REPLAY]
            busy = util is not None and util >= p["busy_util_pct"]
            narrow = (gen is not None and gpu.pcie_link_gen_max and gen < gpu.pcie_link_gen_max) or (
                width is not None and gpu.pcie_link_width_max and width < gpu.pcie_link_width_max
            )
            rate = None
            if replays is not None:
                rate = rate_per(anchor, row[TS], replays, 3600, 600, 3600)
            rising = rate is not None and rate > p["max_replays_per_h"]
            opening = bool(busy and narrow) or rising
            clearing = not (busy and narrow) and not rising
            value = float(width) if width is not None else None
            step(track, row[TS], opening, clearing, value, p, emit, _evidence(rows, i, PCIE_WIDTH))
        track.changed = True


class Overclock(Rule):
    __doc__ = gettext_noop(
        "Enforced power limit above the GPU's default (by more than 2 %), or the SM clock above "
        "`sm_clock_max_mhz` when an admin sets it, for 5 minutes opens; neither for 30 minutes clears."
    )

    key = "overclock"
    summary = gettext_noop(
        # xgettext:no-python-format (a percentage, never formatted)
        "Enforced power limit above the GPU's default (by more than 2 %), or the SM clock above a limit an admin "
        "sets, for 5 minutes opens; neither for 30 minutes clears."
    )
    value_text = gettext_noop("power limit %(value)s W")
    title = gettext_noop("Running above default limits")
    watches = gettext_noop("enforced power limit, SM clock")
    metric = metrics.POWER_LIMIT.name
    unit = "W"
    action = gettext_noop(
        "Overclock only with care: more power and clock means more heat and faster wear. Put the power limit back "
        "to the default (nvidia-smi -pl) unless the owner accepts the risk; watch temperatures if it stays."
    )
    defaults = {"tolerance": 0.02, "sm_clock_max_mhz": None, "open_for_s": 300, "clear_for_s": 1800,
                "max_gap_s": 300}  # fmt: skip

    def evaluate(self, track, gpu, rows, p, emit):
        default_w, clock_max, tolerance = gpu.power_limit_default_w, p["sm_clock_max_mhz"], 1 + p["tolerance"]
        if not default_w and not clock_max:
            return
        for i, row in enumerate(rows):
            limit, clock = row[POWER_LIMIT], row[SM_CLOCK]
            over_power = bool(default_w and limit is not None and limit > default_w * tolerance)
            over_clock = bool(clock_max and clock is not None and clock > clock_max * tolerance)
            opening = over_power or over_clock
            if opening or track.state != "ok":
                step(track, row[TS], opening, not opening, limit, p, emit, _evidence(rows, i, POWER_LIMIT))


class NoRest(Rule):
    __doc__ = gettext_noop(
        "Utilisation ≥ 90 % at high temperature (slowdown − 15 °C, or `high_temp_c`) without a break for "
        "more than 72 hours opens (info); a rest (utilisation below 50 %) of 30 minutes clears."
    )

    key = "no_rest"
    summary = gettext_noop(
        # xgettext:no-python-format (a percentage, never formatted)
        "Utilisation ≥ 90 % at high temperature (15 °C below the slowdown threshold, unless an admin sets "
        "another) without a break for more than 72 hours opens (info); a rest (utilisation below 50 %) of 30 "
        "minutes clears."
    )
    value_text = gettext_noop("utilisation %(value)s %%")
    title = gettext_noop("No rest for 72 h")
    severity = "info"
    watches = gettext_noop("utilisation and temperature over days")
    metric = metrics.UTILIZATION_GPU.name
    unit = "%"
    action = gettext_noop(
        "This GPU has run hot and flat out for days. Schedule training in segments with idle windows (for example "
        "overnight checkpoints with a pause), back up checkpoints, and use the pause to check temperatures and fans."
    )
    defaults = {"busy_util_pct": 90, "rest_util_pct": 50, "high_temp_c": None, "hot_margin_c": care.NO_REST_MARGIN_C,
                "open_for_s": 72 * 3600, "clear_for_s": 1800, "max_gap_s": 900}  # fmt: skip

    def evaluate(self, track, gpu, rows, p, emit):
        hot_c = p["high_temp_c"] or care.below_slowdown_c(gpu.temp_slowdown_c, margin_c=p["hot_margin_c"])
        for row in rows:
            util, temp = row[UTIL], row[TEMP]
            if util is None or temp is None:
                continue
            opening = util >= p["busy_util_pct"] and temp >= hot_c
            if opening or track.state != "ok":
                step(track, row[TS], opening, util < p["rest_util_pct"], util, p, emit)


GPU_RULES: list[Rule] = [
    Overheat(), ThermalThrottle(), FanWear(), CoolingDegradation(), EccUncorrected(), EccCorrectedRate(),
    MemoryPending(), RemapFailure(), Pcie(), Overclock(), NoRest(),
]  # fmt: skip
