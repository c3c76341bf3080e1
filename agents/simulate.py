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

import bisect
import dataclasses
import hashlib
import math
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from agents.device import GpuLost, XidEvent

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
BUS_XID = 79  # fell off the bus: the jobs on the GPU die with it...
XID_KILLS_AFTER_S = 5.0  # ...this many real seconds later
JOB_S = (240.0, 720.0)  # training job length, real seconds
JOB_PAUSE_S = (30.0, 90.0)  # between two jobs
JOB_WARMUP_S = 20.0  # data loading at the start of a job
EVAL_EVERY_S, EVAL_S = (150.0, 240.0), 12.0  # evaluation pass: every so often, this long
SIMULATED_USERS = ("alice", "bob", "chen")  # whose jobs run on the simulated hosts


def gpu_uuid(hostname: str, index: int) -> str:
    return f"GPU-{uuidlib.uuid5(UUID_NAMESPACE, f'{hostname}/{index}')}"


def _host_seed(hostname: str) -> int:
    return int.from_bytes(hashlib.sha256(hostname.encode()).digest()[:8], "big")


def host_job_schedule(hostname: str) -> JobSchedule:
    """The host's job schedule, for what is known of its jobs whatever the clock: their keys and
    users (the demo names the simulated Slurm jobs with it)."""
    return JobSchedule(_host_seed(hostname), 0.0)


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
        self._ends: list[float] = []  # each job's end, to find the job at a time by bisection
        # The collector and a diagnostic (agents.diagnose) may both extend the list.
        self._lock = threading.Lock()

    def _job(self, k: int) -> tuple[float, float, float, float]:
        if k < len(self._jobs):
            return self._jobs[k]
        with self._lock:
            return self._extend(k)

    def _extend(self, k: int) -> tuple[float, float, float, float]:
        while len(self._jobs) <= k:
            rng = random.Random(self.host_seed * 1_000_003 + len(self._jobs))
            start = self._jobs[-1][1] + rng.uniform(*self.pause_s) if self._jobs else 0.0
            end = start + rng.uniform(*self.job_s)
            self._jobs.append((start, end, rng.uniform(0.86, 0.99), rng.uniform(*EVAL_EVERY_S) * self.scale))
            self._ends.append(end)  # after the job: a reader never finds an end without its job
        return self._jobs[k]

    def _index_at(self, elapsed: float) -> int:
        """The first job that ends after `elapsed` (seconds from the origin)."""
        while not self._ends or self._ends[-1] <= elapsed:
            self._job(len(self._ends))
        return bisect.bisect_right(self._ends, elapsed)

    def job_at(self, real_now: float, gpu_seed: int) -> int | None:
        """The number of the job that holds this GPU at real time real_now, or None."""
        elapsed = real_now - self.origin
        if elapsed < 0:
            return None
        k = self._index_at(elapsed)
        if elapsed < self._job(k)[0] or (k > 0 and random.Random(gpu_seed ^ k).random() > 0.85):
            return None
        return k

    def job_key(self, k: int) -> str:
        """Job k's key as the agent reports it: most run under Slurm, some straight from a
        user's shell (ingest-v1.md, `jobs`)."""
        rng = random.Random(self.host_seed * 7_000_003 + k)
        user = rng.choice(SIMULATED_USERS)
        if rng.random() < 0.7:
            return f"slurm:{100_000 + (self.host_seed % 900) * 1000 + k % 1000}"
        return f"user:{user}"

    def job_user(self, k: int) -> str:
        """Whose job k is: what the scheduler's accounting would say of it (the demo names the
        simulated Slurm jobs with it)."""
        return random.Random(self.host_seed * 7_000_003 + k).choice(SIMULATED_USERS)

    def job_number(self, key: str) -> int | None:
        """The number k of this host's job with this key (`slurm:` keys only; the first of the
        numbers that share it), or None when it is not one of this host's."""
        scheduler, _, number = key.partition(":")
        if scheduler != "slurm" or not number.isdigit() or (int(number) - 100_000) // 1000 != self.host_seed % 900:
            return None
        return int(number) % 1000

    def load(self, real_now: float, gpu_seed: int) -> float:
        """Utilisation 0..1 of one GPU at real time real_now."""
        k = self.job_at(real_now, gpu_seed)
        if k is None:
            return 0.0
        elapsed = real_now - self.origin
        start, _end, level, eval_every = self._job(k)
        into = elapsed - start
        wobble = math.sin(real_now / 7 + gpu_seed % 11) * 0.015
        warmup = JOB_WARMUP_S * self.scale
        if into < warmup:
            return 0.35 + 0.2 * into / warmup + wobble  # loading data, compiling
        if into % eval_every > eval_every - EVAL_S * self.scale:
            return 0.4 + wobble  # evaluation pass
        return min(1.0, level + wobble)


@dataclasses.dataclass(frozen=True)
class Effects:
    """What a scenario does to a GPU at one scenario time; the defaults are a healthy GPU."""

    power_limit_factor: float = 1.0
    clock_factor: float = 1.0
    fan_full_under_load: bool = False
    ambient_add_c: float = 0.0
    resistance_factor: float = 1.0  # how hard heat leaves the card, against a clean one
    fan_efficiency: float = 1.0  # air moved per rpm, against new bearings
    fan_failed: bool = False
    power_capped: bool = False  # a power-cap window (with a hardware slowdown inside it, sometimes)
    hw_slowdown: bool = False
    ecc_corrected_per_hour: float = 0.0
    ecc_uncorrected: int = 0
    pcie_link: tuple[int, int] | None = None  # (gen, width) when degraded
    pcie_replays_per_hour: float = 0.0


def _healthy(t: float) -> Effects:
    return Effects()


def _overheat(t: float) -> Effects:
    """A failing rack cooler, over six hours."""
    ramp = min(1.0, t / (6 * HOUR))
    return Effects(ambient_add_c=25 * ramp + 3 * math.sin(t / HOUR), resistance_factor=1.0 + 0.5 * ramp)


def _fan_wear(t: float) -> Effects:
    """Worn bearings: more rpm for less air each day, then the fan stops on day 5."""
    return Effects(fan_efficiency=max(0.45, 1.0 - 0.12 * (t / DAY)), fan_failed=t > 5 * DAY)


def _dust(t: float) -> Effects:
    """Dust in the heatsink: 10 % more thermal resistance every day, so hotter at the same power."""
    return Effects(resistance_factor=1.0 + 0.1 * (t / DAY))


def _ecc(t: float) -> Effects:
    """Corrected errors at an accelerating rate, then an uncorrectable one on day 3 (its XID 48
    comes from xid_codes_between)."""
    days = t / DAY
    return Effects(ecc_corrected_per_hour=2 + 40 * days * days, ecc_uncorrected=1 if days >= 3 else 0)


def _xid(t: float) -> Effects:
    return Effects()  # its XIDs come from xid_codes_between


def _throttle(t: float) -> Effects:
    """A power cap for 40 minutes every two hours, a hardware slowdown in the first 20 minutes
    of every sixth hour."""
    capped = (t % (2 * HOUR)) < 40 * 60
    return Effects(power_capped=capped, hw_slowdown=capped and (t % (6 * HOUR)) < 20 * 60)


def _overclock(t: float) -> Effects:
    """Power limit and clocks raised, fans pinned at full speed under load."""
    return Effects(power_limit_factor=1.1, clock_factor=1.08, fan_full_under_load=True)


def _pcie(t: float) -> Effects:
    """A loose riser: the link narrows (x16, x8, x4) and drops a generation, replays climb."""
    days = t / DAY
    width = 16 if days < 1 else 8 if days < 3 else 4
    return Effects(pcie_link=(4 if days < 2 else 3, width), pcie_replays_per_hour=5 + 200 * days)


def _silent(t: float) -> Effects:
    return Effects()  # it stops answering: SimulatedDeviceClient._gpu


SCENARIO_EFFECTS: dict[str, Callable[[float], Effects]] = {
    "healthy": _healthy,
    "overheat": _overheat,
    "fan-wear": _fan_wear,
    "dust": _dust,
    "ecc": _ecc,
    "xid": _xid,
    "throttle": _throttle,
    "overclock": _overclock,
    "pcie": _pcie,
    "silent": _silent,
}
SCENARIOS = tuple(SCENARIO_EFFECTS)


def _thermal_throttle(temp: float, sm_clock: float, power: float, reasons: list[str]) -> tuple[float, float, float]:
    """Near the slowdown temperature the card cuts its clocks and power, and holds its
    temperature just above slowdown."""
    slowdown = MODEL["temp_slowdown_c"]
    if temp < slowdown - 4:
        return temp, sm_clock, power
    reasons += ["sw_thermal"] + (["hw_thermal"] if temp >= slowdown else [])
    cut = min(0.5, (temp - (slowdown - 4)) * 0.05)
    return min(temp, slowdown + 2.0), sm_clock * (1 - cut), power * (1 - cut / 2)


def _power_throttle(
    effects: Effects, load: float, sm_clock: float, power: float, power_limit: float, reasons: list[str]
) -> tuple[float, float]:
    """A power-cap window holds power at 80 % of the limit; outside one, a card flat out touches
    its power cap anyway."""
    if effects.power_capped and load:
        reasons.append("sw_power_cap")
        power = min(power, power_limit * 0.8)
        sm_clock *= 0.82
        if effects.hw_slowdown:
            reasons.append("hw_slowdown")
            sm_clock *= 0.7
    elif load > 0.95:
        reasons.append("sw_power_cap")
    return sm_clock, power


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
        """One reading at scenario time t and real time real_now: the training job sets the load,
        the scenario's effects (SCENARIO_EFFECTS) bend the physics of a healthy card."""
        effects = SCENARIO_EFFECTS[self.scenario](t)
        load = self.jobs.load(real_now, self.seed)
        power_limit = MODEL["power_limit_default_w"] * effects.power_limit_factor
        power = MODEL["idle_w"] + load * (power_limit * 0.93 - MODEL["idle_w"]) + self.rng.uniform(-3, 3)
        temp, fan = self.temperature_and_fan(power, load, effects)
        temp += self.rng.uniform(-0.5, 0.5)
        sm_clock = MODEL["sm_clock_max_mhz"] * effects.clock_factor if load else 210
        reasons: list[str] = [] if load else ["gpu_idle"]
        temp, sm_clock, power = _thermal_throttle(temp, sm_clock, power, reasons)
        sm_clock, power = _power_throttle(effects, load, sm_clock, power, power_limit, reasons)
        dt_scenario = self._advance(t, real_now, power)
        if effects.ecc_corrected_per_hour:
            rate = effects.ecc_corrected_per_hour * self.rng.uniform(0.5, 1.5)
            self.ecc_corrected += int(dt_scenario / HOUR * rate)
        self.replays += int(dt_scenario / HOUR * effects.pcie_replays_per_hour)
        gen, width = effects.pcie_link or (MODEL["pcie_link_gen_max"], MODEL["pcie_link_width_max"])
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
            "ecc_uncorrected_volatile": effects.ecc_uncorrected,
            "ecc_uncorrected_aggregate": effects.ecc_uncorrected,
            "retired_pages_pending": False,
            "remapped_rows_pending": bool(effects.ecc_uncorrected),
            "remapped_rows_failure": False,
            "pcie_link_gen": gen,
            "pcie_link_width": width,
            "pcie_replay_count": self.replays,
        }

    def temperature_and_fan(self, power: float, load: float, effects: Effects) -> tuple[float, float]:
        """The fan controller and the temperature settled on each other at this power. Thermal
        resistance 1.0 × the card's own is a new, clean card in a cool rack."""
        ambient = self.ambient_c + effects.ambient_add_c
        resistance = self.thermal_c_per_w * effects.resistance_factor
        temp = ambient + 20
        fan = 30.0
        for _ in range(12):
            wanted = 100.0 if effects.fan_full_under_load and load else max(30.0, min(100.0, 30 + (temp - 50) * 2.5))
            fan += (wanted - fan) * 0.6
            airflow = 0.0 if effects.fan_failed else fan / 100 * effects.fan_efficiency
            temp = ambient + power * resistance / (0.3 + airflow)
        return temp, 0.0 if effects.fan_failed else fan

    def _advance(self, t: float, real_now: float, power: float) -> float:
        """Move this GPU's clocks to (t, real_now) and count the energy used since the last
        reading; returns the scenario seconds passed."""
        dt_real = 0.0 if self.last_real is None else max(0.0, real_now - self.last_real)
        dt_scenario = max(0.0, t - self.last_scenario_t)
        self.last_real, self.last_scenario_t = real_now, t
        self.energy_mj += power * dt_real * 1000  # real time: energy deltas must match power
        return dt_scenario

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
        scenario_offset_s: float = 0.0,
    ) -> None:
        self._clock = clock
        # scenario_offset_s: start this far into the scenarios (`diagnose --scenario-at`).
        self._start = clock() - scenario_offset_s / speed
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

    def health(self, index: int) -> dict[str, Any]:
        """The level-1 diagnostic's view, from the scenario alone: reading it changes nothing
        (no counter, no random draw), so a diagnostic beside the collector leaves the readings
        as they would have been."""
        gpu = self._gpu(index)
        effects = SCENARIO_EFFECTS[gpu.scenario](self.scenario_time())
        # A loose riser: the link trains narrower (current width below the maximum) and, once a
        # generation drops, that is all the slot can reach (maximum generation below the GPU's).
        gen, width = effects.pcie_link or (MODEL["pcie_link_gen_max"], MODEL["pcie_link_width_max"])
        return {
            "uuid": gpu.uuid,
            "ecc_uncorrected_volatile": effects.ecc_uncorrected,
            "retired_pages_pending": False,
            "remapped_rows_pending": bool(effects.ecc_uncorrected),
            "remapped_rows_failure": False,
            "pcie_link_gen": gen,
            "pcie_link_width": width,
            "pcie_link_gen_max": gen,
            "pcie_link_width_max": MODEL["pcie_link_width_max"],
            "pcie_link_gen_gpu_max": MODEL["pcie_link_gen_max"],
            "utilization_gpu_pct": round(gpu.jobs.load(self._clock(), gpu.seed) * 100),
        }

    def running_jobs(self, indices: list[int]) -> dict[int, list[str] | None]:
        now, answer = self._clock(), {}
        for index in indices:
            gpu = self._gpus[index]
            k = gpu.jobs.job_at(now, gpu.seed)
            if k is not None and self._fell_off_during(gpu, k, now):
                k = None  # the GPU fell off the bus under the job: its processes there died
            answer[index] = [] if k is None else [gpu.jobs.job_key(k)]
        return answer

    def _fell_off_during(self, gpu: SimulatedGpu, k: int, now: float) -> bool:
        """An XID 79 on the GPU since job k started there, more than XID_KILLS_AFTER_S ago (the
        readings at the XID still name the job: the fault hit it while it ran)."""
        if gpu.scenario != "xid":
            return False
        started = gpu.jobs.origin + gpu.jobs._job(k)[0]
        t0 = max(0.0, (started - self._start) * self._speed)
        t1 = (now - XID_KILLS_AFTER_S - self._start) * self._speed
        return t1 > t0 and BUS_XID in gpu.xid_codes_between(t0, t1)

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
