"""The contract's wear figures computed the plain way, from every reading (portal-api-v1.md, "Wear").
Readings: dicts with ts (epoch s), temperature_c, fan_speed_pct, power_w, energy_mj,
utilization_gpu_pct. The tests hold the portal's incremental figures against these."""

import math


def reference_wear(readings, start=-math.inf, end=math.inf, slowdown=None):
    rs = sorted(readings, key=lambda r: r["ts"])
    hot_c = 80 if slowdown is None else slowdown - 10
    out = dict.fromkeys(("powered", "busy", "hot", "fan", "energy_mj"), 0.0)
    run = longest = 0.0
    for prev, cur in zip([None, *rs[:-1]], rs, strict=True):
        if not (start <= cur["ts"] < end):
            continue
        gap = None if prev is None else cur["ts"] - prev["ts"]
        if gap is None or gap > 120:
            run = 0.0
            continue
        busy = cur["utilization_gpu_pct"] is not None and cur["utilization_gpu_pct"] >= 90
        out["powered"] += gap
        if busy:
            out["busy"] += gap
            run += gap
            longest = max(longest, run)
        else:
            run = 0.0
        if cur["temperature_c"] is not None and cur["temperature_c"] >= hot_c:
            out["hot"] += gap
        if cur["fan_speed_pct"] is not None and cur["fan_speed_pct"] >= 80:
            out["fan"] += gap
        if prev["energy_mj"] is not None and cur["energy_mj"] is not None:
            rise = cur["energy_mj"] - prev["energy_mj"]
            out["energy_mj"] += rise if rise >= 0 else cur["energy_mj"]
        elif cur["power_w"] is not None:
            out["energy_mj"] += cur["power_w"] * gap * 1000
    cycles, high, ref = 0, False, None
    for r in rs:
        t = r["temperature_c"]
        if not (start <= r["ts"] < end) or t is None:
            continue
        if ref is None:
            ref = t
        elif not high:
            if t >= ref + 30:
                cycles, high, ref = cycles + 1, True, t
            else:
                ref = min(ref, t)
        elif t <= ref - 30:
            high, ref = False, t
        else:
            ref = max(ref, t)
    return {
        "powered_hours": out["powered"] / 3600,
        "busy_hours": out["busy"] / 3600,
        "hot_hours": out["hot"] / 3600,
        "fan_high_hours": out["fan"] / 3600,
        "longest_busy_hours": longest / 3600,
        "thermal_cycles": cycles,
        "energy_kwh": out["energy_mj"] / 3.6e9,
    }


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(0.01 * abs(b), 0.01)
