"""The device-client interface and its real backend, NVML through nvidia-ml-py.

Everything the collector knows about GPUs comes through `DeviceClient`; the simulator
(`agents.simulate`) implements the same interface. Values leave a device client already in
protocol units (W, MiB, MHz, °C, %), keyed by protocol field names, `None` for unsupported.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from agents.jobs import JobNamer

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# Protocol names of NVML's clock event (a.k.a. throttle) reasons, in bit order. Bits without a
# protocol name (board limit, reliability, ...) are left out: an unknown name would get the
# whole batch rejected.
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks_setting"),
)

INVENTORY_FIELDS = (
    "uuid",
    "index",
    "name",
    "serial",
    "pci_bus_id",
    "vbios_version",
    "memory_total_mib",
    "power_limit_default_w",
    "temp_slowdown_c",
    "temp_shutdown_c",
    "pcie_link_gen_max",
    "pcie_link_width_max",
)
METRIC_FIELDS = (
    "temperature_c",
    "fan_speed_pct",
    "power_w",
    "power_limit_w",
    "energy_mj",
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "memory_used_mib",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pstate",
    "throttle_reasons",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "ecc_uncorrected_aggregate",
    "retired_pages_pending",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "pcie_link_gen",
    "pcie_link_width",
    "pcie_replay_count",
)

# What the agent's own level-1 diagnostic reads (agents.diagnose): pcie_link_*_max is what the
# GPU and its slot together can reach; pcie_link_gen_gpu_max what the GPU alone can (null where
# NVML does not tell).
HEALTH_FIELDS = (
    "uuid",
    "ecc_uncorrected_volatile",
    "retired_pages_pending",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "pcie_link_gen",
    "pcie_link_width",
    "pcie_link_gen_max",
    "pcie_link_width_max",
    "pcie_link_gen_gpu_max",
    "utilization_gpu_pct",
)


_PID = operator.attrgetter("pid")  # of an NVML process entry

PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)


class GpuLost(Exception):
    """The GPU stopped answering (fell off the bus); skip it, keep the others going."""


class DeviceUnavailable(Exception):
    """The device backend cannot start at all (no driver, no library)."""


@dataclass(frozen=True, slots=True)
class XidEvent:
    gpu_uuid: str
    ts: float
    code: int


class DeviceClient(Protocol):
    def system_info(self) -> dict[str, str | None]:
        """driver_version, cuda_driver_version, nvml_version."""

    def gpu_indices(self) -> list[int]: ...

    def inventory(self, index: int) -> dict[str, Any]:
        """INVENTORY_FIELDS of one GPU; raises GpuLost."""

    def metrics(self, index: int) -> dict[str, Any]:
        """METRIC_FIELDS of one GPU; raises GpuLost."""

    def take_xid_events(self) -> list[XidEvent]:
        """XID errors seen since the previous call."""

    def running_jobs(self, indices: list[int]) -> dict[int, list[str] | None]:
        """The job keys (ingest-v1.md, `jobs`) of each GPU's compute processes now; None for a
        GPU whose processes cannot be told."""

    def health(self, index: int) -> dict[str, Any]:
        """HEALTH_FIELDS of one GPU, for the level-1 diagnostic (agents.diagnose); raises GpuLost.
        Reads only: safe to call from another thread while the collector runs."""

    def close(self) -> None: ...


def throttle_reason_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASON_BITS if mask & bit]


def cuda_version_text(version: int) -> str:
    # NVML encodes CUDA 13.0 as 13000.
    return f"{version // 1000}.{(version % 1000) // 10}"


def _text(value: Any) -> str:
    """NVML's text answers: bytes from older nvidia-ml-py releases, str from newer ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def watts(milliwatts: int) -> float:
    # NVML's milliwatts are whole numbers, whose quotient by 1000 is already the float nearest to
    # three decimals (round() would give it back unchanged, at a quarter of a microsecond a call).
    if type(milliwatts) is int:
        return milliwatts / 1000.0
    return round(milliwatts / 1000.0, 3)


class NvmlDeviceClient:
    """DeviceClient over nvidia-ml-py. One nvmlInit per process; XID events in a thread."""

    def __init__(self, *, xid_poll_ms: int = 1000, nvml: Any = None, job_namer: JobNamer | None = None) -> None:
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as exc:
                raise DeviceUnavailable(f"nvidia-ml-py is not installed: {exc}") from exc
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise DeviceUnavailable(f"NVML could not start: {exc}") from exc
        self._handles: dict[int, Any] = {}
        self._uuid_by_index: dict[int, str] = {}
        self._reported_errors: set[tuple[str, str]] = set()
        self._xid_lock = threading.Lock()
        self._xid_events: list[XidEvent] = []
        self._stop = threading.Event()
        self._xid_poll_ms = xid_poll_ms
        self._job_namer = job_namer or JobNamer()
        self._processes_call: Any = None  # the process-list call this driver answers
        self._xid_thread: threading.Thread | None = None
        self._event_set: Any = None
        count = self._query("nvmlDeviceGetCount") or 0
        self._indices = list(range(count))
        self._start_xid_watch()

    # One wrapper for every NVML call (nvitop's nvmlQuery idea): the call is named once, by the
    # function's name in nvidia-ml-py; any NVML error but a lost GPU becomes None for that field,
    # logged once per (call, error) so a quiet failure is visible. `text=True` decodes the answer
    # (bytes from older bindings, str from newer ones); `detail` tells apart calls of one function
    # with different arguments in the log.
    def _query(self, function: str, *args: Any, text: bool = False, detail: str = "") -> Any:
        nvml = self._nvml
        try:
            value = getattr(nvml, function)(*args)
        except nvml.NVMLError as exc:
            if exc.value == nvml.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost(str(exc)) from exc
            name = f"{function}({detail})" if detail else function
            key = (name, type(exc).__name__)
            if key not in self._reported_errors:
                self._reported_errors.add(key)
                level = logging.DEBUG if exc.value == nvml.NVML_ERROR_NOT_SUPPORTED else logging.WARNING
                log.log(level, "%s: %s; reporting null", name, exc)
            return None
        return _text(value) if text and value is not None else value

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            handle = self._query("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                raise GpuLost(f"no NVML handle for GPU {index}")
            self._handles[index] = handle
        return handle

    def system_info(self) -> dict[str, str | None]:
        cuda = self._query("nvmlSystemGetCudaDriverVersion")
        return {
            "driver_version": self._query("nvmlSystemGetDriverVersion", text=True),
            "cuda_driver_version": None if cuda is None else cuda_version_text(cuda),
            "nvml_version": self._query("nvmlSystemGetNVMLVersion", text=True),
        }

    def gpu_indices(self) -> list[int]:
        return list(self._indices)

    def inventory(self, index: int) -> dict[str, Any]:
        nvml, q, h = self._nvml, self._query, self._handle(index)
        uuid = q("nvmlDeviceGetUUID", h, text=True)
        if uuid is None:
            # Without a uuid the portal cannot place the readings; treat it like a lost GPU.
            raise GpuLost(f"GPU {index} has no readable uuid")
        self._uuid_by_index[index] = uuid
        name = q("nvmlDeviceGetName", h, text=True)
        serial = q("nvmlDeviceGetSerial", h, text=True)
        pci = q("nvmlDeviceGetPciInfo", h)
        vbios = q("nvmlDeviceGetVbiosVersion", h, text=True)
        memory = q("nvmlDeviceGetMemoryInfo", h)
        power_default = q("nvmlDeviceGetPowerManagementDefaultLimit", h)
        return {
            "uuid": uuid,
            "index": index,
            "name": name,
            "serial": serial,
            "pci_bus_id": None if pci is None else _text(pci.busId),
            "vbios_version": vbios,
            "memory_total_mib": None if memory is None else memory.total // MIB,
            "power_limit_default_w": None if power_default is None else watts(power_default),
            "temp_slowdown_c": q(
                "nvmlDeviceGetTemperatureThreshold", h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, detail="slowdown"
            ),
            "temp_shutdown_c": q(
                "nvmlDeviceGetTemperatureThreshold", h, nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, detail="shutdown"
            ),
            "pcie_link_gen_max": q("nvmlDeviceGetMaxPcieLinkGeneration", h),
            "pcie_link_width_max": q("nvmlDeviceGetMaxPcieLinkWidth", h),
        }

    def metrics(self, index: int) -> dict[str, Any]:
        nvml, q, h = self._nvml, self._query, self._handle(index)
        fan = q("nvmlDeviceGetFanSpeed", h)
        power = q("nvmlDeviceGetPowerUsage", h)
        power_limit = q("nvmlDeviceGetEnforcedPowerLimit", h)
        energy = q("nvmlDeviceGetTotalEnergyConsumption", h)
        utilization = q("nvmlDeviceGetUtilizationRates", h)
        memory = q("nvmlDeviceGetMemoryInfo", h)
        pstate = q("nvmlDeviceGetPerformanceState", h)
        reasons = self._clock_event_reasons(h)
        retired = q("nvmlDeviceGetRetiredPagesPendingStatus", h)
        remapped = q("nvmlDeviceGetRemappedRows", h)
        return {
            "temperature_c": q("nvmlDeviceGetTemperature", h, nvml.NVML_TEMPERATURE_GPU),
            # Some boards report a fan target above 100 %; the protocol's range is 0-100 and an
            # out-of-range value would get the whole batch rejected.
            "fan_speed_pct": None if fan is None else min(fan, 100),
            "power_w": None if power is None else watts(power),
            "power_limit_w": None if power_limit is None else watts(power_limit),
            "energy_mj": None if energy is None else float(energy),
            "utilization_gpu_pct": None if utilization is None else utilization.gpu,
            "utilization_memory_pct": None if utilization is None else utilization.memory,
            "memory_used_mib": None if memory is None else memory.used // MIB,
            "sm_clock_mhz": q("nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_SM, detail="sm"),
            "mem_clock_mhz": q("nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_MEM, detail="mem"),
            # NVML_PSTATE_UNKNOWN (32) is "not known", which the protocol spells null.
            "pstate": pstate if pstate is not None and 0 <= pstate <= 15 else None,
            "throttle_reasons": None if reasons is None else throttle_reason_names(reasons),
            "ecc_corrected_volatile": q(
                "nvmlDeviceGetTotalEccErrors",
                h,
                nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                nvml.NVML_VOLATILE_ECC,
                detail="corrected,volatile",
            ),
            "ecc_uncorrected_volatile": q(
                "nvmlDeviceGetTotalEccErrors",
                h,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC,
                detail="uncorrected,volatile",
            ),
            "ecc_uncorrected_aggregate": q(
                "nvmlDeviceGetTotalEccErrors",
                h,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_AGGREGATE_ECC,
                detail="uncorrected,aggregate",
            ),
            "retired_pages_pending": None if retired is None else retired == nvml.NVML_FEATURE_ENABLED,
            "remapped_rows_pending": None if remapped is None else bool(remapped[2]),
            "remapped_rows_failure": None if remapped is None else bool(remapped[3]),
            "pcie_link_gen": q("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "pcie_link_width": q("nvmlDeviceGetCurrPcieLinkWidth", h),
            "pcie_replay_count": q("nvmlDeviceGetPcieReplayCounter", h),
        }

    def health(self, index: int) -> dict[str, Any]:
        nvml, q, h = self._nvml, self._query, self._handle(index)
        uuid = q("nvmlDeviceGetUUID", h, text=True)
        if uuid is None:
            raise GpuLost(f"GPU {index} has no readable uuid")
        retired = q("nvmlDeviceGetRetiredPagesPendingStatus", h)
        remapped = q("nvmlDeviceGetRemappedRows", h)
        utilization = q("nvmlDeviceGetUtilizationRates", h)
        return {
            "uuid": uuid,
            "ecc_uncorrected_volatile": q(
                "nvmlDeviceGetTotalEccErrors",
                h,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC,
                detail="uncorrected,volatile",
            ),
            "retired_pages_pending": None if retired is None else retired == nvml.NVML_FEATURE_ENABLED,
            "remapped_rows_pending": None if remapped is None else bool(remapped[2]),
            "remapped_rows_failure": None if remapped is None else bool(remapped[3]),
            "pcie_link_gen": q("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "pcie_link_width": q("nvmlDeviceGetCurrPcieLinkWidth", h),
            "pcie_link_gen_max": q("nvmlDeviceGetMaxPcieLinkGeneration", h),
            "pcie_link_width_max": q("nvmlDeviceGetMaxPcieLinkWidth", h),
            "pcie_link_gen_gpu_max": q("nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
            "utilization_gpu_pct": None if utilization is None else utilization.gpu,
        }

    def _clock_event_reasons(self, handle: Any) -> int | None:
        # "Clock event reasons" is the name since driver 535; older drivers only know the
        # deprecated "throttle reasons" call, which returns the same bitmask.
        reasons = self._query("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:
            reasons = self._query("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return reasons

    # Compute processes -----------------------------------------------------------------------

    def running_jobs(self, indices: list[int]) -> dict[int, list[str] | None]:
        # Every collection asks every GPU (the reading's `jobs` is what runs at its `ts`), so the
        # usual case is kept short: the process-list call known, the handle cached, one call and
        # the pids read off its answer.
        function, handles, error = self._processes_call, self._handles, self._nvml.NVMLError
        pids: dict[int, list[int] | None] = {}
        for index in indices:
            handle = handles.get(index)
            if function is None or handle is None:
                pids[index] = self._compute_pids(index)
                function = self._processes_call
                continue
            try:
                pids[index] = list(map(_PID, function(handle)))
            except error as exc:
                pids[index] = self._query_failed(function.__name__, exc)
        return self._job_namer.jobs(pids)

    def _compute_pids(self, index: int) -> list[int] | None:
        """The pids of the GPU's compute processes; None when NVML cannot tell."""
        try:
            handle = self._handle(index)
        except GpuLost:
            return None
        nvml, function = self._nvml, self._processes_call
        if function is not None:
            try:
                return [process.pid for process in function(handle)]
            except nvml.NVMLError as exc:
                return self._query_failed(function.__name__, exc)
        # The first time: the newest call the bindings offer that the driver knows, v3 (driver
        # 510+), v2, then the unversioned name (an alias of one of them, by the bindings' release).
        for name in PROCESS_CALLS:
            function = getattr(nvml, name, None)
            if not callable(function):
                continue
            try:
                processes = function(handle)
            except nvml.NVMLError as exc:
                if exc.value == nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    continue
                return self._query_failed(name, exc)
            self._processes_call = function
            return [process.pid for process in processes]
        return None

    def _query_failed(self, function: str, exc: Any) -> None:
        if exc.value == self._nvml.NVML_ERROR_GPU_IS_LOST:
            return None
        key = (function, type(exc).__name__)
        if key not in self._reported_errors:
            self._reported_errors.add(key)
            log.warning("%s: %s; the readings carry no jobs", function, exc)
        return None

    # XID errors ---------------------------------------------------------------------------

    def _start_xid_watch(self) -> None:
        nvml = self._nvml
        event_set = self._query("nvmlEventSetCreate")
        if event_set is None:
            return
        registered = 0
        for index in self._indices:
            try:
                handle = self._handle(index)
                supported = self._query("nvmlDeviceGetSupportedEventTypes", handle)
                if not supported or not supported & nvml.nvmlEventTypeXidCriticalError:
                    continue
                self._query(
                    "nvmlDeviceRegisterEvents",
                    handle,
                    nvml.nvmlEventTypeXidCriticalError,
                    event_set,
                )
                registered += 1
            except GpuLost:
                log.warning("GPU %d is lost; not watching it for XID errors", index)
        if not registered:
            log.info("no GPU supports XID events; xid_events will stay empty")
            self._query("nvmlEventSetFree", event_set)
            return
        self._event_set = event_set
        self._xid_thread = threading.Thread(target=self._watch_xid, name="xid-watch", daemon=True)
        self._xid_thread.start()

    def _watch_xid(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait(self._event_set, self._xid_poll_ms)
            except nvml.NVMLError as exc:
                if exc.value != nvml.NVML_ERROR_TIMEOUT:
                    log.warning("waiting for NVML events failed: %s", exc)
                    self._stop.wait(1.0)
                continue
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            received = time.time()
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
            except nvml.NVMLError as exc:
                log.error("XID %d on a GPU whose uuid cannot be read (%s); dropped", data.eventData, exc)
                continue
            log.warning("XID %d on %s", data.eventData, uuid)
            with self._xid_lock:
                self._xid_events.append(XidEvent(gpu_uuid=uuid, ts=received, code=int(data.eventData)))

    def take_xid_events(self) -> list[XidEvent]:
        with self._xid_lock:
            events, self._xid_events = self._xid_events, []
        return events

    def close(self) -> None:
        self._stop.set()
        if self._xid_thread is not None:
            self._xid_thread.join(timeout=self._xid_poll_ms / 1000 + 2)
        if self._event_set is not None:
            self._query("nvmlEventSetFree", self._event_set)
        self._query("nvmlShutdown")
