"""A simulated GPU backend behind the DeviceClient interface, with named failure scenarios.

Readings carry real wall-clock timestamps; only the *scenario* clock runs `speed` times
faster, so a demo shows days of drift in minutes while the portal still gets fresh data. The
training jobs that load the GPUs run on the real clock (jobs 4-12 minutes long with a short pause
between them, every GPU of a host in the same job, a dip for evaluation every few minutes), so
the charts look like a lab's whatever the speed.
Everything is derived from (hostname, index, scenario time), so a restarted simulator
reports the same GPUs (same uuids) with the same character.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from agents.device import GpuLost, XidEvent

SCENARIOS = ("healthy", "overheat", "fan-wear", "dust", "ecc", "xid", "throttle", "overclock", "pcie", "silent")
UUID_NAMESPACE = uuidlib.UUID("6f1c1a2b-3c4d-4b4e-9d0a-1c1d2c1e6b9b")

HOUR = 3600.0
DAY = 24 * HOUR

# A board with a fan, so that the fan scenarios have something to show.
MODEL = {
    "name": "NVIDIA RTX 6000 Ada Generation",
    "memory_total_mib": 49140,
    "power_limit_default_w": 300.0,
    "temp_slowdown_c": 90,
    "temp_shutdown_c": 95,
    "pcie_link_gen_max": 4,
    "pcie_link_width_max": 16,
    "sm_clock_max_mhz": 2505,
    "mem_clock_mhz": 10001,
    "idle_w": 28.0,
}
XID_CYCLE = (79, 13, 48, 94, 31, 43)  # 79 first: 'fallen off the bus' opens a ticket at once
XID_FIRST_S = 15 * 60  # the first XID, in scenario seconds
JOB_S = (240.0, 720.0)  # training job length, real seconds
JOB_PAUSE_S = (30.0, 90.0)  # between two jobs
JOB_WARMUP_S = 20.0  # data loading at the start of a job
EVAL_EVERY_S, EVAL_S = (150.0, 240.0), 12.0  # evaluation pass: every so often, this long


def gpu_uuid(hostname: str, index: int) -> str:
    return f"GPU-{uuidlib.uuid5(UUID_NAMESPACE, f'{hostname}/{index}')}"


def _host_seed(hostname: str) -> int:
    return int.from_bytes(hashlib.sha256(hostname.encode()).digest()[:8], "big")


def parse_scenarios(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown or not names:
        raise ValueError(f"unknown scenario(s) {unknown or text!r}; known: {', '.join(SCENARIOS)}")
    return names


class JobSchedule:
    """The training jobs of one host on the real clock, from `origin` on: the first starts at
    once; every GPU of the host takes part in the first job and most later ones."""

    def __init__(
        self,
        host_seed: int,
        origin: float,
        job_s: tuple[float, float] = JOB_S,
        pause_s: tuple[float, float] = JOB_PAUSE_S,
    ) -> None:
        self.host_seed = host_seed
        self.origin = origin
        self.job_s, self.pause_s = job_s, pause_s
        self.scale = job_s[0] / JOB_S[0]  # longer jobs: warm-up and evaluation passes longer too
        self._jobs: list[tuple[float, float, float, float]] = []  # (start, end, level, eval period)

    def _job(self, k: int) -> tuple[float, float, float, float]:
        while len(self._jobs) <= k:
            rng = random.Random(self.host_seed * 1_000_003 + len(self._jobs))
            start = self._jobs[-1][1] + rng.uniform(*self.pause_s) if self._jobs else 0.0
            end = start + rng.uniform(*self.job_s)
            self._jobs.append((start, end, rng.uniform(0.86, 0.99), rng.uniform(*EVAL_EVERY_S) * self.scale))
        return self._jobs[k]

    def load(self, real_now: float, gpu_seed: int) -> float:
        """Utilisation 0..1 of one GPU at real time real_now."""
        elapsed = real_now - self.origin
        if elapsed < 0:
            return 0.0
        k = 0
        while self._job(k)[1] <= elapsed:
            k += 1
        start, _end, level, eval_every = self._job(k)
        if elapsed < start or (k > 0 and random.Random(gpu_seed ^ k).random() > 0.85):
            return 0.0
        into = elapsed - start
        wobble = math.sin(real_now / 7 + gpu_seed % 11) * 0.015
        warmup = JOB_WARMUP_S * self.scale
        if into < warmup:
            return 0.35 + 0.2 * into / warmup + wobble  # loading data, compiling
        if into % eval_every > eval_every - EVAL_S * self.scale:
            return 0.4 + wobble  # evaluation pass
        return min(1.0, level + wobble)


class SimulatedGpu:
    def __init__(self, hostname: str, index: int, scenario: str, jobs: JobSchedule | None = None) -> None:
        self.index = index
        self.scenario = scenario
        self.uuid = gpu_uuid(hostname, index)
        seed = int.from_bytes(hashlib.sha256(self.uuid.encode()).digest()[:8], "big")
        self.seed = seed
        self.jobs = jobs or JobSchedule(_host_seed(hostname), time.time())
        self.rng = random.Random(seed)
        self.ambient_c = 24.0 + (seed % 50) / 10  # each GPU its own spot in the rack
        self.thermal_c_per_w = 0.145 + (seed % 7) / 1000
        self.energy_mj = float(seed % 10_000_000)
        self.last_real: float | None = None
        self.last_scenario_t = 0.0
        self.ecc_corrected = 0
        self.replays = 0
        serial = str(1320000000000 + seed % 1_000_000_000)
        self.inventory = {
            "uuid": self.uuid,
            "index": index,
            "name": MODEL["name"],
            "serial": serial,
            "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
            "vbios_version": "95.02.5D.00.01",
            "memory_total_mib": MODEL["memory_total_mib"],
            "power_limit_default_w": MODEL["power_limit_default_w"],
            "temp_slowdown_c": MODEL["temp_slowdown_c"],
            "temp_shutdown_c": MODEL["temp_shutdown_c"],
            "pcie_link_gen_max": MODEL["pcie_link_gen_max"],
            "pcie_link_width_max": MODEL["pcie_link_width_max"],
        }

    def sample(self, t: float, real_now: float) -> dict[str, Any]:
        s = self.scenario
        load = self.jobs.load(real_now, self.seed)
        power_limit = MODEL["power_limit_default_w"] * (1.1 if s == "overclock" else 1.0)
        power = MODEL["idle_w"] + load * (power_limit * 0.93 - MODEL["idle_w"]) + self.rng.uniform(-3, 3)
        reasons: list[str] = [] if load else ["gpu_idle"]

        # How well heat leaves the card: 1.0 is a new, clean card in a cool rack.
        ambient = self.ambient_c
        resistance = self.thermal_c_per_w
        fan_efficiency = 1.0
        fan_failed = False
        if s == "dust":
            resistance *= 1.0 + 0.1 * (t / DAY)  # a little worse every day, at the same power
        elif s == "overheat":
            ramp = min(1.0, t / (6 * HOUR))  # a failing rack cooler, over six hours
            ambient += 25 * ramp + 3 * math.sin(t / HOUR)
            resistance *= 1.0 + 0.5 * ramp
        elif s == "fan-wear":
            fan_efficiency = max(0.45, 1.0 - 0.12 * (t / DAY))  # worn bearings: more rpm, less air
            fan_failed = t > 5 * DAY
        temp = ambient + 20
        fan = 30.0
        for _ in range(12):  # the fan controller and the temperature settle on each other
            wanted = 100.0 if s == "overclock" and load else max(30.0, min(100.0, 30 + (temp - 50) * 2.5))
            fan += (wanted - fan) * 0.6
            airflow = 0.0 if fan_failed else fan / 100 * fan_efficiency
            temp = ambient + power * resistance / (0.3 + airflow)
        if fan_failed:
            fan = 0.0
        temp += self.rng.uniform(-0.5, 0.5)

        sm_clock = MODEL["sm_clock_max_mhz"] * (1.08 if s == "overclock" else 1.0) if load else 210
        slowdown = MODEL["temp_slowdown_c"]
        if temp >= slowdown - 4:
            reasons += ["sw_thermal"] + (["hw_thermal"] if temp >= slowdown else [])
            cut = min(0.5, (temp - (slowdown - 4)) * 0.05)
            sm_clock *= 1 - cut
            power *= 1 - cut / 2
            temp = min(temp, slowdown + 2.0)
        if s == "throttle" and load and (t % (2 * HOUR)) < 40 * 60:
            reasons.append("sw_power_cap")
            power = min(power, power_limit * 0.8)
            sm_clock *= 0.82
            if (t % (6 * HOUR)) < 20 * 60:
                reasons.append("hw_slowdown")
                sm_clock *= 0.7
        elif load > 0.95:
            reasons.append("sw_power_cap")

        dt_real = 0.0 if self.last_real is None else max(0.0, real_now - self.last_real)
        dt_scenario = max(0.0, t - self.last_scenario_t)
        self.last_real, self.last_scenario_t = real_now, t
        self.energy_mj += power * dt_real * 1000  # real time: energy deltas must match power

        uncorrected = 0
        if s == "ecc":
            days = t / DAY
            # Corrected errors at an accelerating rate, then an uncorrectable one on day 3.
            self.ecc_corrected += int(dt_scenario / HOUR * (2 + 40 * days * days) * self.rng.uniform(0.5, 1.5))
            uncorrected = 1 if days >= 3 else 0
        gen, width = MODEL["pcie_link_gen_max"], MODEL["pcie_link_width_max"]
        if s == "pcie":
            days = t / DAY
            width = 16 if days < 1 else 8 if days < 3 else 4
            gen = 4 if days < 2 else 3
            self.replays += int(dt_scenario / HOUR * (5 + 200 * days))

        return {
            "temperature_c": round(temp),
            "fan_speed_pct": round(fan),
            "power_w": round(power, 1),
            "power_limit_w": power_limit,
            "energy_mj": round(self.energy_mj, 3),
            "utilization_gpu_pct": round(load * 100),
            "utilization_memory_pct": round(load * 45),
            "memory_used_mib": 512 + round(load * (MODEL["memory_total_mib"] - 4096)),
            "sm_clock_mhz": round(sm_clock),
            "mem_clock_mhz": MODEL["mem_clock_mhz"] if load else 405,
            "pstate": 0 if load else 8,
            "throttle_reasons": reasons,
            "ecc_corrected_volatile": self.ecc_corrected,
            "ecc_uncorrected_volatile": uncorrected,
            "ecc_uncorrected_aggregate": uncorrected,
            "retired_pages_pending": False,
            "remapped_rows_pending": bool(uncorrected),
            "remapped_rows_failure": False,
            "pcie_link_gen": gen,
            "pcie_link_width": width,
            "pcie_replay_count": self.replays,
        }

    def xid_codes_between(self, t0: float, t1: float) -> list[int]:
        if self.scenario == "ecc":
            return [48] if t0 < 3 * DAY <= t1 else []
        if self.scenario != "xid":
            return []
        # One XID XID_FIRST_S in, then every three scenario hours, cycling through common codes.
        period = 3 * HOUR
        first = max(0, math.floor((t0 - XID_FIRST_S) / period) + 1)
        last = math.floor((t1 - XID_FIRST_S) / period)
        return [XID_CYCLE[k % len(XID_CYCLE)] for k in range(first, last + 1)][:20]


class SimulatedDeviceClient:
    """DeviceClient for N simulated GPUs; scenarios go round-robin over the GPUs."""

    def __init__(
        self,
        *,
        count: int,
        scenarios: list[str],
        hostname: str,
        speed: float = 1.0,
        clock: Callable[[], float] = time.time,
        silent_after_s: float = 30 * 60,
        job_s: tuple[float, float] = JOB_S,
        pause_s: tuple[float, float] = JOB_PAUSE_S,
    ) -> None:
        self._clock = clock
        self._start = clock()
        self._speed = speed
        self._silent_after_s = silent_after_s
        jobs = JobSchedule(_host_seed(hostname), self._start, job_s, pause_s)
        self._gpus = [SimulatedGpu(hostname, i, scenarios[i % len(scenarios)], jobs) for i in range(count)]
        self._xid_checked_t = 0.0

    def scenario_time(self) -> float:
        return (self._clock() - self._start) * self._speed

    def system_info(self) -> dict[str, str | None]:
        return {"driver_version": "580.65.06", "cuda_driver_version": "13.0", "nvml_version": "13.580.65.06"}

    def gpu_indices(self) -> list[int]:
        return [gpu.index for gpu in self._gpus]

    def _gpu(self, index: int) -> SimulatedGpu:
        gpu = self._gpus[index]
        if gpu.scenario == "silent" and self.scenario_time() > self._silent_after_s:
            raise GpuLost("simulated: stopped answering (scenario 'silent')")
        return gpu

    def inventory(self, index: int) -> dict[str, Any]:
        return dict(self._gpu(index).inventory)

    def metrics(self, index: int) -> dict[str, Any]:
        return self._gpu(index).sample(self.scenario_time(), self._clock())

    def take_xid_events(self) -> list[XidEvent]:
        t = self.scenario_time()
        now = self._clock()
        events = [
            XidEvent(gpu_uuid=gpu.uuid, ts=now, code=code)
            for gpu in self._gpus
            for code in gpu.xid_codes_between(self._xid_checked_t, t)
        ]
        self._xid_checked_t = t
        return events

    def close(self) -> None:
        pass
