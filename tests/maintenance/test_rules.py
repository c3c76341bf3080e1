"""Each rule: a series that fires, one that must not, and an oscillating one that must not flap."""

import datetime as dt

from portal.maintenance.models import Ticket
from portal.maintenance.rules import RULES
from portal.telemetry.models import THROTTLE_BIT
from tests.maintenance.helpers import T0, feed, series

HW = THROTTLE_BIT["hw_slowdown"]
CAP = THROTTLE_BIT["sw_power_cap"]


def rules_fired():
    return sorted(Ticket.objects.values_list("rule", flat=True))


def test_every_rule_documents_itself():
    for rule in RULES.values():
        assert rule.title and rule.action and rule.watches, rule.key
        assert rule.__doc__ or rule.key.startswith("schedule_"), rule.key


# --- thermal throttling ---------------------------------------------------------------------


def test_throttle_fires_above_20_percent_over_10_minutes(gpu):
    feed(gpu, series([{"throttle_reasons": HW if i % 3 == 0 else CAP} for i in range(70)]))
    assert rules_fired() == ["thermal_throttle"]


def test_throttle_power_cap_alone_is_not_thermal(gpu):
    feed(gpu, series([{"throttle_reasons": CAP} for i in range(200)]))
    assert rules_fired() == []


def test_throttle_below_20_percent_does_not_fire(gpu):
    feed(gpu, series([{"throttle_reasons": HW if i % 6 == 0 else 0} for i in range(300)]))
    assert rules_fired() == []


def test_throttle_oscillating_around_threshold_opens_once(gpu):
    # 25 % for 10 min, 12 % for 10 min, repeated: never back to ≤ 5 %, so one ticket, one occurrence.
    rows = series([{"throttle_reasons": HW if i % (4 if (i // 60) % 2 == 0 else 8) == 0 else 0} for i in range(720)])
    feed(gpu, rows)
    assert Ticket.objects.get().occurrences == 1


# --- fan wear -------------------------------------------------------------------------------


def test_fan_at_zero_while_hot_fires_critical(gpu):
    feed(gpu, series([{"temperature_c": 78, "fan_speed_pct": 0}] * 20))
    ticket = Ticket.objects.get(rule="fan_wear")
    assert ticket.severity == "critical"


def test_fan_saturated_while_temperature_climbs_fires(gpu):
    feed(gpu, series([{"temperature_c": 76 + i // 6, "fan_speed_pct": 97} for i in range(60)]))
    assert "fan_wear" in rules_fired()


def test_fan_at_zero_while_cool_is_fine(gpu):
    feed(gpu, series([{"temperature_c": 40, "fan_speed_pct": 0, "utilization_gpu_pct": 0}] * 200))
    assert rules_fired() == []


def test_fan_needing_more_duty_over_weeks_fires(gpu):
    days = []
    for day in range(10):
        fan = 55 if day < 7 else 75  # same temperature, more fan
        start = T0 + dt.timedelta(days=day)
        days += series([{"temperature_c": 65, "fan_speed_pct": fan + (i % 3)} for i in range(60)], start=start,
                       step_s=60)  # fmt: skip
    feed(gpu, days, chunk=120)
    assert rules_fired() == ["fan_wear"]


def test_fan_flicking_to_saturation_does_not_flap(gpu):
    rows = series([{"temperature_c": 70 + (i % 2), "fan_speed_pct": 96 if i % 2 else 80} for i in range(400)])
    feed(gpu, rows)
    assert rules_fired() == []


# --- cooling degradation (dust) -------------------------------------------------------------


def _dust_days(rise_per_day: float, days: int = 10, wobble: float = 0.0):
    rows = []
    for day in range(days):
        start = T0 + dt.timedelta(days=day)
        resistance = 0.12 * (1 + rise_per_day * max(0, day - 6)) * (1 + (wobble if day % 2 else -wobble))
        idle = [{"utilization_gpu_pct": 0, "power_w": 30.0, "temperature_c": 35}] * 30
        busy = [{"utilization_gpu_pct": 95, "power_w": 250.0, "temperature_c": round(35 + 250 * resistance)}] * 60
        rows += series(idle + busy, start=start, step_s=60)
    return rows


def test_dust_fires_cleaning_due_before_any_temperature_alarm(gpu):
    feed(gpu, _dust_days(0.2), chunk=200)
    assert rules_fired() == ["cooling_degradation"]


def test_dust_stable_card_does_not_fire(gpu):
    feed(gpu, _dust_days(0.0), chunk=200)
    assert rules_fired() == []


def test_dust_day_to_day_wobble_does_not_flap(gpu):
    feed(gpu, _dust_days(0.0, days=14, wobble=0.05), chunk=200)
    assert rules_fired() == []


# --- memory ---------------------------------------------------------------------------------


def test_uncorrected_ecc_is_critical_at_once(gpu):
    feed(gpu, series([{}] * 3 + [{"ecc_uncorrected_volatile": 1, "ecc_uncorrected_aggregate": 1}]))
    ticket = Ticket.objects.get(rule="ecc_uncorrected")
    assert ticket.severity == "critical"


def test_corrected_ecc_rate(gpu):
    feed(gpu, series([{"ecc_corrected_volatile": i * 2} for i in range(200)], step_s=60))  # 2/min = 2880/day
    assert rules_fired() == ["ecc_corrected_rate"]


def test_corrected_ecc_slow_growth_is_fine(gpu):
    feed(gpu, series([{"ecc_corrected_volatile": i // 60} for i in range(600)], step_s=60))  # 24/day
    assert rules_fired() == []


def test_pending_remap_asks_drain_and_reset_then_clears(gpu):
    rows = series([{"remapped_rows_pending": True}] * 5 + [{}] * 70, step_s=10)
    feed(gpu, rows)
    ticket = Ticket.objects.get(rule="memory_pending")
    assert "reset" in ticket.action and ticket.state == "resolved"


def test_remap_failure_asks_rma(gpu):
    feed(gpu, series([{"remapped_rows_failure": True}] * 2))
    assert "RMA" in Ticket.objects.get(rule="remap_failure").action


def test_memory_flags_flapping_keep_one_ticket(gpu):
    feed(gpu, series([{"remapped_rows_pending": i % 2 == 0} for i in range(200)]))
    assert Ticket.objects.get(rule="memory_pending").occurrences == 1


# --- XID ------------------------------------------------------------------------------------


def test_xid_classes_and_actions(gpu):
    ts = T0.timestamp()
    feed(gpu, [], xids={gpu.pk: [(ts, 79), (ts + 1, 48), (ts + 2, 74), (ts + 3, 13)]})
    assert rules_fired() == ["xid_bus", "xid_ecc", "xid_nvlink"]
    assert Ticket.objects.get(rule="xid_bus").severity == "critical"


def test_application_xid_opens_only_when_it_repeats(gpu):
    ts = T0.timestamp()
    feed(gpu, [], xids={gpu.pk: [(ts, 13), (ts + 600, 31)]})
    assert rules_fired() == []
    feed(gpu, [], xids={gpu.pk: [(ts + 1200, 43)]})
    assert rules_fired() == ["xid_application"]


def test_application_xids_spread_over_days_never_open(gpu):
    for day in range(6):
        feed(gpu, [], xids={gpu.pk: [(T0.timestamp() + day * 86400 * 0.6, 13)]})
    assert rules_fired() == []


# --- PCIe -----------------------------------------------------------------------------------


def test_pcie_narrow_link_while_busy(gpu):
    feed(gpu, series([{"pcie_link_width": 8}] * 40))
    assert "seating" in Ticket.objects.get(rule="pcie").action


def test_pcie_downtrained_while_idle_is_normal(gpu):
    feed(gpu, series([{"pcie_link_gen": 1, "utilization_gpu_pct": 0}] * 100))
    assert rules_fired() == []


def test_pcie_replays_rising(gpu):
    feed(gpu, series([{"pcie_replay_count": i} for i in range(100)], step_s=30))  # 120/h
    assert rules_fired() == ["pcie"]


def test_pcie_oscillating_load_does_not_flap(gpu):
    rows = series([{"pcie_link_width": 8, "utilization_gpu_pct": 95 if (i // 40) % 2 else 10} for i in range(800)])
    feed(gpu, rows)
    assert Ticket.objects.get(rule="pcie").occurrences == 1


# --- overclocking ---------------------------------------------------------------------------


def test_overclock_power_limit_above_default(gpu):
    feed(gpu, series([{"power_limit_w": 330.0}] * 40))
    ticket = Ticket.objects.get(rule="overclock")
    assert ticket.severity == "warning" and "care" in ticket.action


def test_overclock_default_limit_is_fine(gpu):
    feed(gpu, series([{"power_limit_w": 300.0}] * 100))
    assert rules_fired() == []


def test_overclock_toggling_does_not_flap(gpu):
    rows = series([{"power_limit_w": 330.0 if (i // 60) % 2 else 300.0} for i in range(1200)])
    feed(gpu, rows)
    assert Ticket.objects.get(rule="overclock").occurrences == 1


# --- no rest --------------------------------------------------------------------------------


def test_no_rest_after_72_hours_hot_and_busy(gpu):
    rows = series([{"utilization_gpu_pct": 98, "temperature_c": 80}] * (73 * 12), step_s=300)
    feed(gpu, rows, chunk=500)
    ticket = Ticket.objects.get(rule="no_rest")
    assert ticket.severity == "info" and "segments" in ticket.action


def test_no_rest_with_daily_pauses_is_fine(gpu):
    rows = series([{"utilization_gpu_pct": 10 if i % 288 < 12 else 98, "temperature_c": 80} for i in range(288 * 5)],
                  step_s=300)  # fmt: skip
    feed(gpu, rows, chunk=500)
    assert rules_fired() == []


def test_no_rest_threshold_is_editable(gpu):
    from portal.maintenance.services.config import rule_config_set

    rule_config_set(rule="no_rest", params={"open_for_s": 3600})
    feed(gpu, series([{"utilization_gpu_pct": 98, "temperature_c": 80}] * 20, step_s=300))
    assert rules_fired() == ["no_rest"]
