"""NvmlDeviceClient + Collector against the stand-in pynvml: field mapping, nulls, lost GPUs, XIDs."""

from __future__ import annotations

import logging
import time

import pytest
from protocol_check import parse_ts, protocol_problems

from agents.agent import Agent
from agents.collector import Collector
from agents.device import DeviceUnavailable, NvmlDeviceClient


def collect(client) -> tuple[list[dict], list[dict]]:
    collection = Collector(client).collect()
    return collection.readings, collection.inventory


def test_every_reading_field_maps_from_its_nvml_call(fake_nvml, open_client):
    gpu = fake_nvml.fake_reset(
        [
            fake_nvml.FakeGpu(
                index=0,
                temp_c=71,
                fan_pct=63,
                power_mw=412_345,
                power_limit_mw=650_000,
                energy_mj=987_654_321,
                util_gpu=97,
                util_mem=41,
                memory_used=80211 * 1024 * 1024 + 5,
                sm_mhz=1980,
                mem_mhz=3201,
                pstate=2,
                clock_reasons=fake_nvml.nvmlClocksEventReasonSwPowerCap
                | fake_nvml.nvmlClocksEventReasonHwThermalSlowdown,
                ecc={(0, 0): 12, (1, 0): 3, (0, 1): 40, (1, 1): 7},
                retired_pending=fake_nvml.NVML_FEATURE_ENABLED,
                remapped=(5, 1, 1, 0),
                pcie_gen=4,
                pcie_width=8,
                pcie_replays=17,
            )
        ]
    )[0]
    before = time.time()
    readings, _ = collect(open_client())
    (reading,) = readings
    assert reading == {
        "gpu_uuid": gpu.uuid,
        "ts": reading["ts"],
        "temperature_c": 71,
        "fan_speed_pct": 63,
        "power_w": 412.345,
        "power_limit_w": 650.0,
        "energy_mj": 987654321.0,
        "utilization_gpu_pct": 97,
        "utilization_memory_pct": 41,
        "memory_used_mib": 80211,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201,
        "pstate": 2,
        "throttle_reasons": ["sw_power_cap", "hw_thermal"],
        "ecc_corrected_volatile": 12,
        "ecc_uncorrected_volatile": 3,
        "ecc_uncorrected_aggregate": 7,
        "retired_pages_pending": True,
        "remapped_rows_pending": True,
        "remapped_rows_failure": False,
        "pcie_link_gen": 4,
        "pcie_link_width": 8,
        "pcie_replay_count": 17,
        "xid_events": [],
        "jobs": [],  # no compute process (tests/agents/test_agent_jobs.py names them)
    }
    assert reading["ts"].endswith("Z")
    assert before - 0.01 <= parse_ts(reading["ts"]) <= time.time() + 0.01


def test_every_inventory_field_and_the_host_versions_map(fake_nvml, open_client):
    gpu = fake_nvml.fake_reset(
        [
            fake_nvml.FakeGpu(
                index=0,
                name="NVIDIA H200",
                serial="1650724012345",
                bus_id="00000000:1B:00.0",
                vbios="96.00.A5.00.01",
                memory_total=143771 * 1024 * 1024,
                power_default_mw=700_000,
                temp_slowdown_c=90,
                temp_shutdown_c=95,
                pcie_gen_max=5,
                pcie_width_max=16,
            )
        ]
    )[0]
    client = open_client()
    _, inventory = collect(client)
    assert inventory == [
        {
            "uuid": gpu.uuid,
            "index": 0,
            "name": "NVIDIA H200",
            "serial": "1650724012345",
            "pci_bus_id": "00000000:1B:00.0",
            "vbios_version": "96.00.A5.00.01",
            "memory_total_mib": 143771,
            "power_limit_default_w": 700.0,
            "temp_slowdown_c": 90,
            "temp_shutdown_c": 95,
            "pcie_link_gen_max": 5,
            "pcie_link_width_max": 16,
        }
    ]
    assert client.system_info() == {
        "driver_version": "580.65.06",
        "cuda_driver_version": "13.0",
        "nvml_version": "13.580.65.06",
    }


def test_all_throttle_reason_bits_have_protocol_names(fake_nvml, open_client):
    n = fake_nvml
    fake_nvml.fake_reset(count=1)[0].clock_reasons = (
        n.nvmlClocksEventReasonGpuIdle
        | n.nvmlClocksEventReasonApplicationsClocksSetting
        | n.nvmlClocksEventReasonSwPowerCap
        | n.nvmlClocksEventReasonHwSlowdown
        | n.nvmlClocksEventReasonSyncBoost
        | n.nvmlClocksEventReasonSwThermalSlowdown
        | n.nvmlClocksEventReasonHwThermalSlowdown
        | n.nvmlClocksEventReasonHwPowerBrakeSlowdown
        | n.nvmlClocksEventReasonDisplayClockSetting
        | n.nvmlClocksThrottleReasonBoardLimit
    )  # no protocol name: left out
    readings, _ = collect(open_client())
    assert readings[0]["throttle_reasons"] == [
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clocks_setting",
    ]


def test_older_driver_without_clock_event_reasons_falls_back_to_throttle_reasons(fake_nvml, open_client):
    gpu = fake_nvml.fake_reset(count=1)[0]
    gpu.errors["nvmlDeviceGetCurrentClocksEventReasons"] = fake_nvml.NVML_ERROR_FUNCTION_NOT_FOUND
    gpu.clock_reasons = fake_nvml.nvmlClocksThrottleReasonSwThermalSlowdown
    readings, _ = collect(open_client())
    assert readings[0]["throttle_reasons"] == ["sw_thermal"]


# pynvml function -> the reading fields that must turn null when it is not supported.
READING_CALLS = {
    "nvmlDeviceGetTemperature": ["temperature_c"],
    "nvmlDeviceGetFanSpeed": ["fan_speed_pct"],
    "nvmlDeviceGetPowerUsage": ["power_w"],
    "nvmlDeviceGetEnforcedPowerLimit": ["power_limit_w"],
    "nvmlDeviceGetTotalEnergyConsumption": ["energy_mj"],
    "nvmlDeviceGetUtilizationRates": ["utilization_gpu_pct", "utilization_memory_pct"],
    "nvmlDeviceGetMemoryInfo": ["memory_used_mib"],
    "nvmlDeviceGetClockInfo": ["sm_clock_mhz", "mem_clock_mhz"],
    "nvmlDeviceGetPerformanceState": ["pstate"],
    "nvmlDeviceGetTotalEccErrors": ["ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate"],
    "nvmlDeviceGetRetiredPagesPendingStatus": ["retired_pages_pending"],
    "nvmlDeviceGetRemappedRows": ["remapped_rows_pending", "remapped_rows_failure"],
    "nvmlDeviceGetCurrPcieLinkGeneration": ["pcie_link_gen"],
    "nvmlDeviceGetCurrPcieLinkWidth": ["pcie_link_width"],
    "nvmlDeviceGetPcieReplayCounter": ["pcie_replay_count"],
}
INVENTORY_CALLS = {
    "nvmlDeviceGetName": ["name"],
    "nvmlDeviceGetSerial": ["serial"],
    "nvmlDeviceGetPciInfo": ["pci_bus_id"],
    "nvmlDeviceGetVbiosVersion": ["vbios_version"],
    "nvmlDeviceGetMemoryInfo": ["memory_total_mib"],
    "nvmlDeviceGetPowerManagementDefaultLimit": ["power_limit_default_w"],
    "nvmlDeviceGetTemperatureThreshold": ["temp_slowdown_c", "temp_shutdown_c"],
    "nvmlDeviceGetMaxPcieLinkGeneration": ["pcie_link_gen_max"],
    "nvmlDeviceGetMaxPcieLinkWidth": ["pcie_link_width_max"],
}


@pytest.mark.parametrize("call", sorted(READING_CALLS.keys() | INVENTORY_CALLS.keys()))
@pytest.mark.parametrize("error", ["NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_UNKNOWN"])
def test_an_unsupported_call_gives_null_for_its_fields_only(fake_nvml, open_client, call, error):
    gpus = fake_nvml.fake_reset(count=2)
    gpus[0].errors[call] = getattr(fake_nvml, error)
    healthy_readings, healthy_inventory = collect(open_client())

    readings, inventory = collect(open_client())
    nulled_reading = set(READING_CALLS.get(call, []))
    nulled_inventory = set(INVENTORY_CALLS.get(call, []))
    for key, value in readings[0].items():
        if key in nulled_reading:
            assert value is None, key
        elif key != "ts":
            assert value == healthy_readings[0][key] and value is not None or key == "xid_events", key
    for key, value in inventory[0].items():
        assert (value is None) == (key in nulled_inventory), key
    assert readings[1]["temperature_c"] == 64 and inventory[1]["name"] == "NVIDIA H200"


def test_a_gpu_without_anything_supported_still_reports_its_reading_all_null(fake_nvml, open_client):
    gpu = fake_nvml.fake_reset(count=1)[0]
    calls = READING_CALLS.keys() | {
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses",
    }
    gpu.errors = dict.fromkeys(calls, fake_nvml.NVML_ERROR_NOT_SUPPORTED)
    readings, _ = collect(open_client())
    assert {k: v for k, v in readings[0].items() if v is not None} == {
        "gpu_uuid": gpu.uuid,
        "ts": readings[0]["ts"],
        "xid_events": [],
    }


def test_pstate_unknown_is_null_and_fan_above_100_is_capped(fake_nvml, open_client):
    gpu = fake_nvml.fake_reset(count=1)[0]
    gpu.pstate = fake_nvml.NVML_PSTATE_UNKNOWN
    gpu.fan_pct = 104
    readings, _ = collect(open_client())
    assert readings[0]["pstate"] is None
    assert readings[0]["fan_speed_pct"] == 100


def test_a_lost_gpu_is_skipped_and_the_others_go_on(fake_nvml, open_client, caplog):
    gpus = fake_nvml.fake_reset(count=3)
    client = open_client()
    collector = Collector(client)
    assert len(collector.collect().readings) == 3

    gpus[1].lost = True
    for _ in range(3):
        readings = collector.collect().readings
        assert [r["gpu_uuid"] for r in readings] == [gpus[0].uuid, gpus[2].uuid]
    assert sum("GPU 1 is lost" in r.getMessage() for r in caplog.records) == 1  # logged once, not every interval

    gpus[1].lost = False
    assert len(collector.collect().readings) == 3


def test_a_gpu_lost_before_start_does_not_stop_the_others(fake_nvml, open_client):
    gpus = fake_nvml.fake_reset(count=3)
    gpus[0].lost = True
    readings, inventory = collect(open_client())
    assert [r["gpu_uuid"] for r in readings] == [gpus[1].uuid, gpus[2].uuid]
    assert [g["index"] for g in inventory] == [1, 2]


def test_nvml_is_initialised_once_per_process_not_per_interval(fake_nvml, open_client):
    collector = Collector(open_client())
    for _ in range(5):
        collector.collect()
    assert fake_nvml.fake_init_count() == 1


def test_no_nvml_library_is_a_clear_error(fake_nvml):
    fake_nvml.system_errors["nvmlInit"] = fake_nvml.NVML_ERROR_LIBRARY_NOT_FOUND
    original = fake_nvml.nvmlInit

    def failing_init():
        raise fake_nvml.NVMLError(fake_nvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    fake_nvml.nvmlInit = failing_init
    try:
        with pytest.raises(DeviceUnavailable, match="NVML could not start"):
            NvmlDeviceClient()
    finally:
        fake_nvml.nvmlInit = original


def wait_for(predicate, timeout=2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_xid_events_are_attached_to_the_next_reading_of_their_gpu(fake_nvml, open_client):
    gpus = fake_nvml.fake_reset(count=2)
    client = open_client()
    collector = Collector(client)
    collector.collect()
    before = time.time()
    fake_nvml.fake_emit_xid(1, 79)
    fake_nvml.fake_emit_xid(1, 48)
    assert wait_for(lambda: len(client._xid_events) == 2)
    readings = {r["gpu_uuid"]: r for r in collector.collect().readings}
    assert readings[gpus[0].uuid]["xid_events"] == []
    events = readings[gpus[1].uuid]["xid_events"]
    assert [e["code"] for e in events] == [79, 48]
    assert all(before - 0.01 <= parse_ts(e["ts"]) <= time.time() for e in events)
    # Reported once only.
    assert all(r["xid_events"] == [] for r in collector.collect().readings)


def test_xid_events_of_a_lost_gpu_wait_for_its_next_reading(fake_nvml, open_client):
    gpus = fake_nvml.fake_reset(count=2)
    client = open_client()
    collector = Collector(client)
    collector.collect()
    fake_nvml.fake_emit_xid(0, 79)
    assert wait_for(lambda: len(client._xid_events) == 1)
    gpus[0].lost = True
    assert [r["gpu_uuid"] for r in collector.collect().readings] == [gpus[1].uuid]
    gpus[0].lost = False
    readings = collector.collect().readings
    assert [e["code"] for e in readings[0]["xid_events"]] == [79]


def test_gpus_without_xid_event_support_are_not_registered(fake_nvml, open_client):
    gpus = fake_nvml.fake_reset(count=2)
    gpus[0].supported_events = 0
    client = open_client()
    fake_nvml.fake_emit_xid(0, 13)
    fake_nvml.fake_emit_xid(1, 31)
    assert wait_for(lambda: len(client._xid_events) == 1)
    assert [e.code for e in client.take_xid_events()] == [31]


def test_a_batch_from_the_fake_gpus_is_valid_protocol(fake_nvml, open_client):
    fake_nvml.fake_reset(count=4)[2].errors["nvmlDeviceGetFanSpeed"] = fake_nvml.NVML_ERROR_NOT_SUPPORTED
    agent = Agent(collector=Collector(open_client()), hostname="dgx-07", spool=None, batch_interval_s=0)
    (batch,) = agent.collect()
    assert protocol_problems(batch) == []
    assert len(batch["gpus"]) == 4 and len(batch["readings"]) == 4
    assert batch["readings"][2]["fan_speed_pct"] is None
    assert batch["host"]["hostname"] == "dgx-07" and batch["host"]["cuda_driver_version"] == "13.0"


def test_inventory_goes_with_the_first_batch_and_again_when_it_changes(fake_nvml, open_client):
    gpus = fake_nvml.fake_reset(count=2)
    agent = Agent(
        collector=Collector(open_client(), inventory_refresh_s=0), hostname="h", spool=None, batch_interval_s=0
    )
    assert "gpus" in agent.collect()[0]
    assert "gpus" not in agent.collect()[0]
    gpus[1].vbios = "96.00.A5.00.02"  # a VBIOS flash
    (batch,) = agent.collect()
    assert batch["gpus"][1]["vbios_version"] == "96.00.A5.00.02"
    assert "gpus" not in agent.collect()[0]
    agent.inventory_lost()
    assert "gpus" in agent.collect()[0]


def test_batches_hold_at_most_max_batch_readings(fake_nvml, open_client):
    fake_nvml.fake_reset(count=3)
    agent = Agent(
        collector=Collector(open_client()), hostname="h", spool=None, batch_interval_s=3600, max_batch_readings=4
    )
    first = agent.collect()  # the first batch goes at once: it carries the inventory
    assert [len(b["readings"]) for b in first] == [3]
    assert agent.collect() == []  # 3 pending, batch interval not reached
    batches = agent.collect()  # 6 pending >= 4
    assert [len(b["readings"]) for b in batches] == [4, 2]


def test_with_batch_interval_equal_to_interval_each_collection_is_its_own_batch(fake_nvml, open_client):
    fake_nvml.fake_reset(count=2)
    now = [1000.0]
    agent = Agent(
        collector=Collector(open_client()), hostname="h", spool=None, batch_interval_s=10, clock=lambda: now[0]
    )
    for _ in range(4):
        assert [len(b["readings"]) for b in agent.collect()] == [2]
        now[0] += 10


def test_a_failing_call_is_logged_once_by_its_nvml_name(fake_nvml, open_client, caplog):
    gpus = fake_nvml.fake_reset(count=2)
    gpus[0].errors["nvmlDeviceGetTemperatureThreshold"] = fake_nvml.NVML_ERROR_UNKNOWN
    client = open_client()
    with caplog.at_level(logging.DEBUG, logger="agents.device"):
        for _ in range(3):
            collect(client)
    named = [r.getMessage().split(":")[0] for r in caplog.records if "reporting null" in r.getMessage()]
    assert sorted(named) == [
        "nvmlDeviceGetTemperatureThreshold(shutdown)",
        "nvmlDeviceGetTemperatureThreshold(slowdown)",
    ]


def test_timestamps_are_written_as_datetime_writes_them():
    """The collector formats the date and time of day once per second and cuts the milliseconds
    itself: the text is datetime's for any timestamp, a fraction rounding up into the next
    second (or minute, day, year) included."""
    import math
    import random
    from datetime import UTC, datetime

    from agents.collector import rfc3339

    def datetimes(ts: float) -> str:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    rng = random.Random(7)
    edges = [0.0, 0.0005, 0.9995, 0.9999994, 0.9999995, 0.9999996, 1.0000005, 86399.9999996, 1798761599.9999997]
    stamps = edges + [rng.uniform(0, 4e9) for _ in range(5000)]
    stamps += [math.floor(ts) + rng.randrange(2_000_001) / 2e6 for ts in stamps[:3000]]
    stamps += [1.7e9 + k * 0.0001 for k in range(30_000)]  # 3 s in steps, the same second asked in a row
    assert [rfc3339(ts) for ts in stamps] == [datetimes(ts) for ts in stamps]
    assert rfc3339(1798761599.9999997) == "2027-01-01T00:00:00.000Z"
    assert rfc3339(-1.5) == datetimes(-1.5)


def test_watts_are_the_milliwatts_to_three_decimals():
    import random

    from agents.device import watts

    rng = random.Random(3)
    for milliwatts in [0, 1, 999, 1001, 412_345, 2**32 - 1, *(rng.randrange(2**32) for _ in range(20_000))]:
        assert watts(milliwatts) == round(milliwatts / 1000.0, 3)
        assert repr(watts(milliwatts)) == repr(round(milliwatts / 1000.0, 3))
    assert watts(412_345.6) == 412.346  # a float (no NVML call gives one) still rounds
