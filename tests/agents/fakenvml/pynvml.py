"""Stand-in for nvidia-ml-py's `pynvml` on machines without a GPU.

Same function names, constants and error classes (generated the way pynvml does) as
nvidia-ml-py 13.x, for the calls the agent makes. Values are in NVML's own units (mW, bytes,
mJ). Tests and the bench configure it through the `fake_*` functions, which the real module
does not have.
"""

from __future__ import annotations

import queue
import string
import sys
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3

NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1

NVML_PSTATE_0 = 0
NVML_PSTATE_UNKNOWN = 32

nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksEventReasonNone = 0x0000000000000000
nvmlClocksThrottleReasonGpuIdle = 0x0000000000000001
nvmlClocksThrottleReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksThrottleReasonSwPowerCap = 0x0000000000000004
nvmlClocksThrottleReasonHwSlowdown = 0x0000000000000008
nvmlClocksThrottleReasonSyncBoost = 0x0000000000000010
nvmlClocksThrottleReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksThrottleReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksThrottleReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksThrottleReasonBoardLimit = 0x0000000000000200
nvmlClocksThrottleReasonReliability = 0x0000000000000400
nvmlClocksThrottleReasonNone = 0x0000000000000000

nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeClock = 0x0000000000000010
nvmlEventTypeNone = 0x0000000000000000


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = {}

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return f"fake NVML error {self.value}"

    def __eq__(self, other):
        return self.value == other.value

    def __hash__(self):
        return hash(self.value)


def _extractNVMLErrorsAsClasses():
    # The same naming as pynvml: NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost.
    this_module = sys.modules[__name__]
    for err_name in [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)

            return new

        new_error_class = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        new_error_class.__module__ = __name__
        setattr(this_module, class_name, new_error_class)
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()


# --- the fake's state and controls -------------------------------------------------------


@dataclass
class FakeGpu:
    """One GPU, in NVML units. `errors` maps a pynvml function name to an NVML error code."""

    index: int = 0
    uuid: str = ""
    name: str = "NVIDIA H200"
    serial: str = ""
    bus_id: str = ""
    vbios: str = "96.00.A5.00.01"
    memory_total: int = 143771 * 1024 * 1024
    memory_used: int = 80211 * 1024 * 1024
    power_default_mw: int = 700_000
    power_limit_mw: int = 700_000
    power_mw: int = 412_300
    energy_mj: int = 123_456_789
    temp_c: int = 64
    temp_slowdown_c: int = 90
    temp_shutdown_c: int = 95
    fan_pct: int = 55
    util_gpu: int = 97
    util_mem: int = 41
    sm_mhz: int = 1980
    mem_mhz: int = 3201
    pstate: int = 0
    clock_reasons: int = nvmlClocksEventReasonSwPowerCap
    ecc: dict = field(default_factory=lambda: {(0, 0): 0, (1, 0): 0, (0, 1): 0, (1, 1): 0})
    retired_pending: int = NVML_FEATURE_DISABLED
    remapped: tuple = (0, 0, 0, 0)
    pcie_gen: int = 5
    pcie_width: int = 16
    pcie_gen_max: int = 5
    pcie_width_max: int = 16
    pcie_gen_gpu_max: int = 5
    pcie_replays: int = 0
    supported_events: int = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError
    errors: dict = field(default_factory=dict)
    lost: bool = False
    processes: list = field(default_factory=list)  # pids of the compute processes on the GPU

    def __post_init__(self):
        self.uuid = self.uuid or f"GPU-00000000-0000-4000-8000-{self.index:012d}"
        self.serial = self.serial or f"16507240{self.index:05d}"
        self.bus_id = self.bus_id or f"00000000:{0x1B + self.index:02X}:00.0"


class _Handle:
    def __init__(self, gpu: FakeGpu):
        self.gpu = gpu


class _EventSet:
    def __init__(self):
        self.handles: dict[int, int] = {}  # gpu index -> registered event mask
        self.queue: queue.Queue = queue.Queue()


_lock = threading.Lock()
_gpus: list[FakeGpu] = []
_init_count = 0
_event_sets: list[_EventSet] = []
calls = 0  # every NVML call counts; the bench and tests read it
driver_version = "580.65.06"
cuda_driver_version = 13000
nvml_version = "13.580.65.06"
system_errors: dict = {}


def fake_reset(gpus: list[FakeGpu] | None = None, count: int = 2) -> list[FakeGpu]:
    """Start over with these GPUs (default: `count` healthy H200s). Returns the live list."""
    global _init_count, calls, system_errors
    with _lock:
        _gpus[:] = gpus if gpus is not None else [FakeGpu(index=i) for i in range(count)]
        _init_count = 0
        _event_sets.clear()
        calls = 0
        system_errors = {}
    return _gpus


def fake_emit_xid(index: int, code: int) -> None:
    for event_set in _event_sets:
        if _gpus[index].index in event_set.handles:
            event_set.queue.put(
                SimpleNamespace(
                    device=_Handle(_gpus[index]),
                    eventType=nvmlEventTypeXidCriticalError,
                    eventData=code,
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
            )


def fake_init_count() -> int:
    return _init_count


def _check(name: str, handle: _Handle | None = None):
    global calls
    calls += 1
    if _init_count <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if handle is None:
        if name in system_errors:
            raise NVMLError(system_errors[name])
        return None
    gpu = handle.gpu
    if gpu.lost:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    if name in gpu.errors:
        raise NVMLError(gpu.errors[name])
    return gpu


# --- the pynvml API ------------------------------------------------------------------------


def nvmlInit():
    global _init_count
    _init_count += 1


def nvmlInitWithFlags(flags):
    nvmlInit()


def nvmlShutdown():
    global _init_count
    _check("nvmlShutdown")
    _init_count -= 1


def nvmlSystemGetDriverVersion():
    _check("nvmlSystemGetDriverVersion")
    return driver_version


def nvmlSystemGetCudaDriverVersion():
    _check("nvmlSystemGetCudaDriverVersion")
    return cuda_driver_version


def nvmlSystemGetCudaDriverVersion_v2():
    return nvmlSystemGetCudaDriverVersion()


def nvmlSystemGetNVMLVersion():
    _check("nvmlSystemGetNVMLVersion")
    return nvml_version


def nvmlDeviceGetCount():
    _check("nvmlDeviceGetCount")
    return len(_gpus)


def nvmlDeviceGetHandleByIndex(index):
    _check("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(_gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _gpus[index]
    if gpu.lost:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return _Handle(gpu)


def nvmlDeviceGetIndex(handle):
    return _check("nvmlDeviceGetIndex", handle).index


def nvmlDeviceGetUUID(handle):
    return _check("nvmlDeviceGetUUID", handle).uuid


def nvmlDeviceGetName(handle):
    return _check("nvmlDeviceGetName", handle).name


def nvmlDeviceGetSerial(handle):
    return _check("nvmlDeviceGetSerial", handle).serial


def nvmlDeviceGetPciInfo(handle):
    gpu = _check("nvmlDeviceGetPciInfo", handle)
    # Like the ctypes structure: char arrays come back as bytes.
    return SimpleNamespace(
        busId=gpu.bus_id.encode(),
        busIdLegacy=gpu.bus_id.encode()[-12:],
        domain=0,
        bus=int(gpu.bus_id[9:11], 16),
        device=0,
        pciDeviceId=0x233510DE,
        pciSubSystemId=0,
    )


def nvmlDeviceGetPciInfo_v3(handle):
    return nvmlDeviceGetPciInfo(handle)


def nvmlDeviceGetVbiosVersion(handle):
    return _check("nvmlDeviceGetVbiosVersion", handle).vbios


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu = _check("nvmlDeviceGetMemoryInfo", handle)
    return SimpleNamespace(total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used)


def nvmlDeviceGetPowerManagementDefaultLimit(handle):
    return _check("nvmlDeviceGetPowerManagementDefaultLimit", handle).power_default_mw


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return _check("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw


def nvmlDeviceGetPowerUsage(handle):
    return _check("nvmlDeviceGetPowerUsage", handle).power_mw


def nvmlDeviceGetTotalEnergyConsumption(handle):
    return _check("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj


def nvmlDeviceGetTemperature(handle, sensor):
    gpu = _check("nvmlDeviceGetTemperature", handle)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpu.temp_c


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    gpu = _check("nvmlDeviceGetTemperatureThreshold", handle)
    if threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
        return gpu.temp_slowdown_c
    if threshold == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
        return gpu.temp_shutdown_c
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetFanSpeed(handle):
    return _check("nvmlDeviceGetFanSpeed", handle).fan_pct


def nvmlDeviceGetUtilizationRates(handle):
    gpu = _check("nvmlDeviceGetUtilizationRates", handle)
    return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_mem)


def nvmlDeviceGetClockInfo(handle, type):
    gpu = _check("nvmlDeviceGetClockInfo", handle)
    if type == NVML_CLOCK_SM:
        return gpu.sm_mhz
    if type == NVML_CLOCK_MEM:
        return gpu.mem_mhz
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetPerformanceState(handle):
    return _check("nvmlDeviceGetPerformanceState", handle).pstate


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _check("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _check("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_reasons


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    return _check("nvmlDeviceGetTotalEccErrors", handle).ecc[(errorType, counterType)]


def nvmlDeviceGetRetiredPagesPendingStatus(device):
    return _check("nvmlDeviceGetRetiredPagesPendingStatus", device).retired_pending


def nvmlDeviceGetRemappedRows(device):
    return tuple(_check("nvmlDeviceGetRemappedRows", device).remapped)


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _check("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _check("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _check("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _check("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max


def nvmlDeviceGetGpuMaxPcieLinkGeneration(handle):
    return _check("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle).pcie_gen_gpu_max


def nvmlDeviceGetPcieReplayCounter(handle):
    return _check("nvmlDeviceGetPcieReplayCounter", handle).pcie_replays


def _processes(name, handle):
    # As nvidia-ml-py's friendly objects: pid, usedGpuMemory (None where the driver cannot tell).
    gpu = _check(name, handle)
    return [SimpleNamespace(pid=pid, usedGpuMemory=None, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for pid in gpu.processes]  # fmt: skip


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return _processes("nvmlDeviceGetComputeRunningProcesses_v3", handle)


def nvmlDeviceGetComputeRunningProcesses_v2(handle):
    return _processes("nvmlDeviceGetComputeRunningProcesses_v2", handle)


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _processes("nvmlDeviceGetComputeRunningProcesses", handle)


def nvmlDeviceGetSupportedEventTypes(handle):
    return _check("nvmlDeviceGetSupportedEventTypes", handle).supported_events


def nvmlEventSetCreate():
    _check("nvmlEventSetCreate")
    event_set = _EventSet()
    _event_sets.append(event_set)
    return event_set


def nvmlDeviceRegisterEvents(handle, eventTypes, eventSet):
    gpu = _check("nvmlDeviceRegisterEvents", handle)
    if eventTypes & ~gpu.supported_events:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    eventSet.handles[gpu.index] = eventSet.handles.get(gpu.index, 0) | eventTypes


def nvmlEventSetWait_v2(eventSet, timeoutms):
    _check("nvmlEventSetWait")
    try:
        return eventSet.queue.get(timeout=timeoutms / 1000)
    except queue.Empty:
        raise NVMLError(NVML_ERROR_TIMEOUT) from None


def nvmlEventSetWait(eventSet, timeoutms):
    return nvmlEventSetWait_v2(eventSet, timeoutms)


def nvmlEventSetFree(eventSet):
    _check("nvmlEventSetFree")
    if eventSet in _event_sets:
        _event_sets.remove(eventSet)
