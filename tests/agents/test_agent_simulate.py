"""The simulated backend: stable identities, real timestamps, scenario drift on a fast clock."""

from __future__ import annotations

import time

import pytest
from protocol_check import parse_ts, protocol_problems

from agents.agent import Agent
from agents.collector import Collector
from agents.device import GpuLost
from agents.simulate import DAY, HOUR, SCENARIOS, SimulatedDeviceClient, parse_scenarios


class FakeClock:
    """Wall-clock stand-in for the simulator only (not for the agent): jumps forward on demand."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def series(scenario: str, *, days: float, step_h: float = 1.0, count: int = 1) -> list[dict]:
    """Samples of GPU 0 every `step_h` scenario hours (speed 3600: one real second per hour)."""
    clock = FakeClock()
    client = SimulatedDeviceClient(
        count=count, scenarios=[scenario], hostname="sim-t", speed=3600, clock=clock, silent_after_s=float("inf")
    )
    samples = []
    for _ in range(int(days * 24 / step_h)):
        clock.now += step_h
        sample = client.metrics(0)
        sample["t"] = client.scenario_time()
        sample["xids"] = [e.code for e in client.take_xid_events()]
        samples.append(sample)
    return samples


def busy(samples: list[dict]) -> list[dict]:
    return [s for s in samples if s["utilization_gpu_pct"] >= 70]


def test_uuids_and_inventory_are_stable_across_restarts_and_distinct_across_hosts():
    a1 = SimulatedDeviceClient(count=4, scenarios=["healthy"], hostname="sim-a")
    a2 = SimulatedDeviceClient(count=4, scenarios=["healthy"], hostname="sim-a")
    b = SimulatedDeviceClient(count=4, scenarios=["healthy"], hostname="sim-b")
    assert [a1.inventory(i) for i in range(4)] == [a2.inventory(i) for i in range(4)]
    uuids = {a1.inventory(i)["uuid"] for i in range(4)} | {b.inventory(i)["uuid"] for i in range(4)}
    assert len(uuids) == 8 and all(u.startswith("GPU-") for u in uuids)


def test_scenarios_go_round_robin():
    client = SimulatedDeviceClient(count=5, scenarios=["healthy", "dust"], hostname="sim-a")
    assert [gpu.scenario for gpu in client._gpus] == ["healthy", "dust", "healthy", "dust", "healthy"]
    with pytest.raises(ValueError, match="nope"):
        parse_scenarios("healthy,nope")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_makes_valid_protocol_with_real_timestamps(scenario):
    agent = Agent(
        collector=Collector(SimulatedDeviceClient(count=2, scenarios=[scenario], hostname="sim-a", speed=1e6)),
        hostname="sim-a",
        spool=None,
        batch_interval_s=0,
    )
    for _ in range(3):
        for batch in agent.collect():
            assert protocol_problems(batch) == []
            for reading in batch["readings"]:
                # --speed compresses the scenario clock, never the timestamps the portal checks.
                assert abs(parse_ts(reading["ts"]) - time.time()) < 5


def test_healthy_stays_cool_and_unthrottled():
    samples = series("healthy", days=3)
    assert max(s["temperature_c"] for s in samples) < 80
    assert not any({"hw_thermal", "sw_thermal"} & set(s["throttle_reasons"]) for s in samples)
    assert all(s["ecc_uncorrected_volatile"] == 0 and s["pcie_link_width"] == 16 and not s["xids"] for s in samples)


def test_overheat_reaches_thermal_throttling():
    samples = busy(series("overheat", days=1))
    late = [s for s in samples if s["t"] > 6 * HOUR]
    assert max(s["temperature_c"] for s in late) >= 86
    assert any("sw_thermal" in s["throttle_reasons"] for s in late)


def test_dust_raises_temperature_at_the_same_power_over_days():
    samples = busy(series("dust", days=8))
    early = [s for s in samples if s["t"] < 1.5 * DAY]
    late = [s for s in samples if s["t"] > 6.5 * DAY]

    def mean(items, key):
        return sum(s[key] for s in items) / len(items)

    assert abs(mean(late, "power_w") - mean(early, "power_w")) < 20  # same work...
    assert mean(late, "temperature_c") > mean(early, "temperature_c") + 5  # ...hotter


def test_fan_wear_needs_more_fan_for_the_same_heat_then_fails():
    samples = busy(series("fan-wear", days=7))
    day0 = [s["fan_speed_pct"] for s in samples if s["t"] < DAY]
    day4 = [s["fan_speed_pct"] for s in samples if 3.5 * DAY < s["t"] < 4.5 * DAY]
    assert sum(day4) / len(day4) > sum(day0) / len(day0) + 5
    failed = [s for s in samples if s["t"] > 5.2 * DAY]
    assert all(s["fan_speed_pct"] == 0 for s in failed)
    assert max(s["temperature_c"] for s in failed) >= 86


def test_ecc_corrected_errors_grow_then_an_uncorrected_one_with_xid_48():
    samples = series("ecc", days=4)
    corrected = [s["ecc_corrected_volatile"] for s in samples]
    assert corrected == sorted(corrected) and corrected[-1] > corrected[24] > 0
    assert all(s["ecc_uncorrected_volatile"] == 0 for s in samples if s["t"] < 3 * DAY - 1)
    assert samples[-1]["ecc_uncorrected_aggregate"] == 1 and samples[-1]["remapped_rows_pending"]
    assert [x for s in samples for x in s["xids"]] == [48]


def test_xid_scenario_reports_common_codes():
    codes = [x for s in series("xid", days=1) for x in s["xids"]]
    assert {79, 48, 94} <= set(codes) and len(codes) == 8


def test_throttle_shows_power_cap_and_hardware_slowdown():
    reasons = {r for s in series("throttle", days=1, step_h=0.25) for r in s["throttle_reasons"]}
    assert {"sw_power_cap", "hw_slowdown"} <= reasons


def test_overclock_runs_above_the_default_power_limit_and_clocks():
    client = SimulatedDeviceClient(count=1, scenarios=["overclock"], hostname="sim-a")
    samples = busy(series("overclock", days=1))
    assert all(s["power_limit_w"] > client.inventory(0)["power_limit_default_w"] for s in samples)
    assert max(s["sm_clock_mhz"] for s in samples) > 2505


def test_pcie_link_degrades_and_replays_grow():
    samples = series("pcie", days=4)
    assert samples[0]["pcie_link_width"] == 16 and samples[-1]["pcie_link_width"] < 16
    assert samples[-1]["pcie_link_gen"] < samples[0]["pcie_link_gen"]
    assert samples[-1]["pcie_replay_count"] > samples[0]["pcie_replay_count"]


def test_silent_stops_answering():
    clock = FakeClock()
    client = SimulatedDeviceClient(count=2, scenarios=["healthy", "silent"], hostname="sim-a", speed=60, clock=clock)
    client.metrics(1)
    clock.now += 60  # an hour of scenario time
    with pytest.raises(GpuLost):
        client.metrics(1)
    assert client.metrics(0)["temperature_c"] is not None


def test_energy_counter_follows_real_time_power():
    clock = FakeClock()
    client = SimulatedDeviceClient(count=1, scenarios=["healthy"], hostname="sim-a", speed=600, clock=clock)
    first = client.metrics(0)
    clock.now += 10
    second = client.metrics(0)
    assert second["energy_mj"] - first["energy_mj"] == pytest.approx(second["power_w"] * 10 * 1000, rel=1e-3)


def test_load_looks_like_training_jobs_on_the_real_clock_whatever_the_speed():
    """Jobs minutes long (not load flipping every second), all GPUs of a host in the first job."""
    for speed in (1.0, 720.0):
        clock = FakeClock()
        client = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-j", speed=speed, clock=clock)
        busy_flags = []
        for _ in range(30 * 60):  # half an hour, a reading a second
            clock.now += 1
            utilisation = [client.metrics(i)["utilization_gpu_pct"] for i in range(2)]
            busy_flags.append(utilisation[0] >= 30)
            if len(busy_flags) < 240:
                assert min(utilisation) >= 30  # the first job, on both GPUs, lasts minutes
        idle_runs = sum(1 for a, b in zip(busy_flags, busy_flags[1:], strict=False) if a and not b)
        assert 1 <= idle_runs <= 8, idle_runs  # a few pauses between jobs in half an hour
        assert 0.6 < sum(busy_flags) / len(busy_flags) < 0.99


def test_first_xid_comes_a_quarter_of_a_scenario_hour_in():
    clock = FakeClock()
    client = SimulatedDeviceClient(count=1, scenarios=["xid"], hostname="sim-x", speed=60, clock=clock)
    clock.now += 14
    assert client.take_xid_events() == []
    clock.now += 2
    assert [event.code for event in client.take_xid_events()] == [79]
