"""Diagnostics on the host: `dcgmi diag -r LEVEL -j` where DCGM is installed, else the agent's
own NVML checks (level 1) or `skip` (levels 2-3, which need DCGM's stress tests).

The result is the document the agent posts to `POST /api/v1/diagnostics/{id}/result`
(portal-api-v1.md, "Diagnostics and return to service"):
`{"started_at", "finished_at", "tool", "tool_version", "driver_version",
"gpus": [{"uuid", "result", "tests": [{"name", "category", "result", "info"}]}]}`.

DCGM's JSON comes in two shapes; both are read (the field names follow NVIDIA's own schema,
NVIDIA/DCGM `testing/python3/dcgm_diag_schema.json`, and its NVVS JSON writer):
- DCGM 3: `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids": "0" or "0,1,2" (Deployment tests: one result for all GPUs),
  "status": "Pass|Fail|Warn|Skip", "warnings": [{"warning", "error_id"} or text], "info":
  [text]}]}]}], "version"}, "Driver Version Detected"}`.
- DCGM 4: `{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status", "warnings":
  [{"error_category", "error_id", "error_severity", "warning"}], "info"}], "test_summary":
  {"status"}}]}], "runtime_error"}, "entity_groups", "metadata": {"version", "Driver Version
  Detected"}}`.
DCGM's GPU id (`gpu_ids`, `entity_id`) is the NVML index; the device client maps it to a uuid.

Nothing here runs a shell: dcgmi gets an argument list, its own process group (so a time limit
stops all of it), and nothing from a command but the level (an int 1-3) and GPU indices.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agents.collector import rfc3339
from agents.device import DeviceClient, GpuLost, XidEvent

log = logging.getLogger(__name__)

LEVELS = (1, 2, 3)
# Time limit per level, well inside the portal's expiry (1 h at levels 1-2, 4 h at level 3)
# so that a stopped run still reports before the portal gives up on it. DCGM's own figures:
# level 1 takes seconds, level 2 a few minutes, level 3 about 15 minutes per GPU (several GPUs
# run side by side; 8 GPUs take 1-2 hours).
LEVEL_TIME_LIMIT_S = {1: 10 * 60, 2: 45 * 60, 3: 3 * 3600 + 30 * 60}
RESULTS = ("pass", "warn", "fail", "skip")
INFO_MAX = 1000  # per test: 8 GPUs × 20 DCGM tests stay well under the portal's body limits
STDERR_LINES = 5
# DCGM's error id for "Persistence mode for GPU %u is disabled." (dcgm_errors.h, DCGM_FR_PERSISTENCE_MODE).
DCGM_FR_PERSISTENCE_MODE = 29
# dcgmErrorSeverity_t: 1 is "can perform workload, but needs to be monitored".
DCGM_SEVERITY = {0: "none", 1: "monitor", 2: "isolate", 3: "unknown", 4: "triage", 5: "config", 6: "reset"}
DCGM_ERROR_MONITOR = 1


@dataclass(frozen=True, slots=True)
class Target:
    """A GPU to test: its uuid and, if this host has it, its NVML index (DCGM's GPU id)."""

    uuid: str
    index: int | None


def check(name: str, category: str, result: str, info: str = "") -> dict[str, str]:
    assert result in RESULTS
    # Bounded as the portal's result schema bounds them: a result refused for a long name would
    # leave the diagnostic without its evidence.
    return {"name": name[:200], "category": category[:100], "result": result, "info": info[:INFO_MAX]}


def gpu_result(tests: list[dict[str, str]]) -> str:
    """`fail` if any test failed, else `warn` if any warned, `skip` if every test skipped
    (or none ran), else `pass`: a skipped test never makes a pass on its own."""
    results = {t["result"] for t in tests}
    if "fail" in results:
        return "fail"
    if "warn" in results:
        return "warn"
    if not results or results == {"skip"}:
        return "skip"
    return "pass"


def gpu_entry(uuid: str, tests: list[dict[str, str]]) -> dict[str, Any]:
    return {"uuid": uuid, "result": gpu_result(tests), "tests": tests}


# --- XID history ------------------------------------------------------------------------------


class XidLog:
    """XID errors per GPU since its last diagnostic. The collector feeds it (it owns the
    device's event queue); a diagnostic reads it and then marks the GPUs it covered, from its
    start on (an XID during the run counts for the next one). `store` (agents.commands'
    DiagnosticStore) keeps it across restarts."""

    MAX_PER_GPU = 200

    def __init__(self, store: Any = None, *, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._store = store
        self._clock = clock
        self._events: dict[str, list[tuple[float, int]]] = {}
        self._since: dict[str, float] = {}
        self.started_at = clock()
        if store is not None:
            self._events, self._since, first = store.xid_state()
            self.started_at = min(first, self.started_at) if first else self.started_at

    def load(self, events: dict[str, list[tuple[float, int]]], since: dict[str, float], first: float | None) -> None:
        """Take over a stored history (without writing back to it)."""
        with self._lock:
            self._events = {uuid: list(kept) for uuid, kept in events.items()}
            self._since = dict(since)
            if first is not None:
                self.started_at = min(first, self.started_at)

    def add(self, events: Iterable[XidEvent]) -> None:
        events = list(events)
        if not events:
            return
        with self._lock:
            for event in events:
                kept = self._events.setdefault(event.gpu_uuid, [])
                kept.append((event.ts, event.code))
                del kept[: -self.MAX_PER_GPU]
        if self._store is not None:
            self._store.xid_add(events)

    def since_last_diagnostic(self, uuid: str) -> tuple[float, list[tuple[float, int]]]:
        """(since when, [(ts, code), ...]) for one GPU."""
        with self._lock:
            since = self._since.get(uuid, self.started_at)
            return since, [e for e in self._events.get(uuid, []) if e[0] >= since]

    def mark(self, uuids: Iterable[str], at: float) -> None:
        uuids = list(uuids)
        with self._lock:
            for uuid in uuids:
                self._since[uuid] = at
                self._events[uuid] = [e for e in self._events.get(uuid, []) if e[0] >= at]
        if self._store is not None:
            self._store.xid_mark(uuids, at)


# --- targets ----------------------------------------------------------------------------------


def resolve_targets(device: DeviceClient, uuids: list[str] | None, known: dict[int, str] | None = None) -> list[Target]:
    """The GPUs a command names (all of this host's when none), with their NVML indices.
    `known` (index -> uuid, from the collector's inventory) keeps a GPU that stopped answering
    in the run, where its checks fail; a uuid this host never had keeps index None."""
    by_uuid: dict[str, int] = {uuid: index for index, uuid in (known or {}).items()}
    silent: list[int] = []
    for index in device.gpu_indices():
        try:
            by_uuid[device.health(index)["uuid"]] = index
        except GpuLost:
            silent.append(index)
        except Exception:
            log.exception("reading GPU %d for a diagnostic failed", index)
            silent.append(index)
    if uuids:
        return [Target(uuid, by_uuid.get(uuid)) for uuid in dict.fromkeys(uuids)]
    named = set(by_uuid.values())
    for index in silent:
        if index not in named:
            log.error("GPU %d does not answer and its uuid is unknown; the diagnostic cannot report on it", index)
    return [Target(uuid, index) for uuid, index in sorted(by_uuid.items(), key=lambda item: item[1])]


# --- the agent's own checks (NVML) -------------------------------------------------------------


def nvml_checks(device: DeviceClient, target: Target, xids: XidLog | None) -> list[dict[str, str]]:
    """Level 1 without DCGM: every GPU answers; no uncorrected ECC error (volatile); no pending
    retired page or row remap, no row-remap failure; the PCIe link able to reach its maximum
    generation and width; no XID since the last diagnostic."""
    if target.index is None:
        return [check("GPU answers", "Deployment", "fail", "this host has no GPU with this uuid (NVML lists none)")]
    try:
        health = device.health(target.index)
    except GpuLost as exc:
        return [check("GPU answers", "Deployment", "fail", f"GPU {target.index} does not answer NVML: {exc}")]
    if health["uuid"] != target.uuid:
        changed = f"NVML index {target.index} is now {health['uuid']}: the GPUs changed during the run"
        return [check("GPU answers", "Deployment", "fail", changed)]
    tests = [check("GPU answers", "Deployment", "pass", f"GPU {target.index} answers NVML")]
    tests.append(_ecc_test(health))
    tests.append(_memory_retirement_test(health))
    tests.append(_pcie_test(health))
    tests.append(_xid_test(target.uuid, xids))
    return tests


def _ecc_test(health: dict[str, Any]) -> dict[str, str]:
    count = health.get("ecc_uncorrected_volatile")
    if count is None:
        return check("Uncorrected ECC errors", "Memory", "skip", "no ECC counters (ECC off or not supported)")
    if count:
        return check("Uncorrected ECC errors", "Memory", "fail",
                    f"{count} uncorrected ECC error(s) since the driver loaded (volatile count)")  # fmt: skip
    return check("Uncorrected ECC errors", "Memory", "pass", "0 uncorrected ECC errors since the driver loaded")


def _memory_retirement_test(health: dict[str, Any]) -> dict[str, str]:
    name, category = "Retired pages and row remapping", "Memory"
    retired, pending, failure = (
        health.get("retired_pages_pending"),
        health.get("remapped_rows_pending"),
        health.get("remapped_rows_failure"),
    )
    if retired is None and pending is None and failure is None:
        return check(name, category, "skip", "neither page retirement nor row remapping is reported by this GPU")
    problems = []
    if retired:
        problems.append("a retired page is pending (takes effect at the next GPU reset or reboot)")
    if pending:
        problems.append("a row remap is pending (takes effect at the next GPU reset)")
    if failure:
        problems.append("row remapping failed (no spare rows left): the GPU needs replacing")
    if problems:
        return check(name, category, "fail", "; ".join(problems))
    checked = [label for label, value in (("retired pages", retired), ("row remapping", pending)) if value is not None]
    return check(name, category, "pass", f"nothing pending ({', '.join(checked)})")


def _pcie_test(health: dict[str, Any]) -> dict[str, str]:
    name, category = "PCIe link", "Integration"
    gen, width = health.get("pcie_link_gen"), health.get("pcie_link_width")
    gen_max, width_max = health.get("pcie_link_gen_max"), health.get("pcie_link_width_max")
    gpu_gen_max = health.get("pcie_link_gen_gpu_max")
    if gen_max is None and width_max is None:
        return check(name, category, "skip", "the PCIe link is not reported by this GPU")
    problems = []
    # The maximum NVML gives is what the GPU and its slot together can reach; below the GPU's
    # own maximum, the slot, riser or BIOS setting holds it back.
    if gpu_gen_max is not None and gen_max is not None and gen_max < gpu_gen_max:
        problems.append(f"the link can reach gen {gen_max} only; the GPU supports gen {gpu_gen_max}")
    # An idle link drops its generation to save power; its width stays trained.
    if width is not None and width_max is not None and width < width_max:
        problems.append(f"link width x{width}, below its maximum x{width_max}")
    busy = (health.get("utilization_gpu_pct") or 0) > 0
    if busy and gen is not None and gen_max is not None and gen < gen_max:
        problems.append(f"gen {gen} under load, below its maximum gen {gen_max}")
    now = f"gen {gen if gen is not None else '?'} x{width if width is not None else '?'}"
    maximum = f"gen {gen_max if gen_max is not None else '?'} x{width_max if width_max is not None else '?'}"
    if problems:
        return check(name, category, "fail", f"{'; '.join(problems)} (now {now}, maximum {maximum})")
    downclocked = not busy and gen is not None and gen_max is not None and gen < gen_max
    idle = " (idle: the generation steps up under load)" if downclocked else ""
    return check(name, category, "pass", f"now {now}, maximum {maximum}{idle}")


def _xid_test(uuid: str, xids: XidLog | None) -> dict[str, str]:
    name, category = "XID errors", "Hardware"
    if xids is None:
        return check(name, category, "skip", "no XID history on this host (the agent is not running here)")
    since, events = xids.since_last_diagnostic(uuid)
    if events:
        shown = ", ".join(f"XID {code} at {rfc3339(ts)}" for ts, code in events[:10])
        more = f" and {len(events) - 10} more" if len(events) > 10 else ""
        return check(name, category, "fail", f"{len(events)} XID error(s) since {rfc3339(since)}: {shown}{more}")
    return check(name, category, "pass", f"no XID error since {rfc3339(since)}")


# --- DCGM ---------------------------------------------------------------------------------------


class Interrupted(Exception):
    """The agent is stopping: the diagnostic was cut short and has no result."""


class DcgmDocumentError(ValueError):
    """dcgmi's output is not a diagnostic document."""


@dataclass
class DcgmReport:
    tool_version: str | None
    driver_version: str | None
    tests_by_gpu: dict[int, list[dict[str, str]]] = field(default_factory=dict)
    runtime_error: str | None = None


def _status(raw: Any) -> tuple[str, str]:
    text = str(raw or "").strip().lower().replace("_", " ")
    if text in ("pass", "passed"):
        return "pass", ""
    if text in ("warn", "warning"):
        return "warn", ""
    if text in ("fail", "failed", "error"):
        return "fail", ""
    if text in ("skip", "skipped", "not run", "notrun", "not applicable", "n/a"):
        return "skip", ""
    # An unknown status is no evidence of health.
    return "fail", f"dcgmi status {raw!r} is not one the agent knows; counted as a failure"


def _texts(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [str(value.get("warning") or value.get("message") or json.dumps(value))]
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    return [str(value)]


def _warnings(value: Any) -> list[dict[str, Any]]:
    """DCGM 4: [{"warning", "error_id", "error_severity", "error_category"}]; DCGM 3: the same
    objects without severity, or plain strings."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, dict):
            out.append(
                {
                    "warning": str(item.get("warning", "")),
                    "error_id": item.get("error_id"),
                    "error_severity": item.get("error_severity"),
                }
            )
        elif item is not None:
            out.append({"warning": str(item), "error_id": None, "error_severity": None})
    return out


def _is_persistence_mode(warning: dict[str, Any]) -> bool:
    return warning["error_id"] == DCGM_FR_PERSISTENCE_MODE or "persistence mode" in warning["warning"].lower()


def _gpu_ids(result: dict[str, Any]) -> list[int] | None:
    """The GPU ids a result is about; None when it names none (it is about every GPU of the
    run); [] when it is about another kind of entity (a CPU, an NVSwitch)."""
    if "entity_id" in result:
        group = result.get("entity_group")
        group_id = result.get("entity_group_id")
        if (group is not None and str(group).upper() != "GPU") or (group is None and group_id not in (None, 1)):
            return []
        try:
            return [int(result["entity_id"])]
        except (TypeError, ValueError):
            return []
    raw = result.get("gpu_ids", result.get("gpu_id"))
    if raw is None:
        return None
    parts = raw if isinstance(raw, list) else str(raw).split(",")
    ids = []
    for part in parts:
        try:
            ids.append(int(str(part).strip()))
        except ValueError:
            continue
    return ids


def _extract_json(text: str) -> Any:
    """The document, even with a line of noise before it (dcgmi prints warnings on stdout)."""
    start = text.find("{")
    if start < 0:
        raise DcgmDocumentError("no JSON object in dcgmi's output")
    try:
        document, _end = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise DcgmDocumentError(f"dcgmi's output is not valid JSON: {exc}") from exc
    return document


def parse_dcgm(text: str, gpu_ids: list[int]) -> DcgmReport:
    """Read a DCGM 3 or 4 `dcgmi diag -j` document; `gpu_ids` are the GPUs the run covered."""
    document = _extract_json(text)
    if not isinstance(document, dict):
        raise DcgmDocumentError("dcgmi's output is not a JSON object")
    if isinstance(document.get("DCGM Diagnostic"), dict):
        root = document["DCGM Diagnostic"]
        metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
        tool_version = metadata.get("version") or root.get("version")
        driver = metadata.get("Driver Version Detected") or document.get("Driver Version Detected")
    elif isinstance(document.get("DCGM GPU Diagnostic"), dict):
        root = document["DCGM GPU Diagnostic"]
        tool_version = root.get("version")
        driver = document.get("Driver Version Detected") or root.get("Driver Version Detected")
    else:
        raise DcgmDocumentError('neither a "DCGM Diagnostic" (DCGM 4) nor a "DCGM GPU Diagnostic" (DCGM 3) document')
    report = DcgmReport(
        tool_version=None if tool_version is None else str(tool_version),
        driver_version=None if driver is None else str(driver),
        tests_by_gpu={gpu: [] for gpu in gpu_ids},
    )
    runtime_error = root.get("runtime_error") or document.get("runtime_error")
    if runtime_error:
        report.runtime_error = str(runtime_error)
    categories = root.get("test_categories")
    if categories is None and not report.runtime_error:
        raise DcgmDocumentError("the document has no test_categories")
    for category in categories or []:
        if not isinstance(category, dict):
            continue
        category_name = str(category.get("category") or "")
        for entry in category.get("tests") or []:
            if isinstance(entry, dict):
                _read_test(report, category_name, entry, gpu_ids)
    return report


def _read_test(report: DcgmReport, category: str, entry: dict[str, Any], gpu_ids: list[int]) -> None:
    name = str(entry.get("name") or "unnamed test")
    results = [r for r in entry.get("results") or [] if isinstance(r, dict)]
    if not results and isinstance(entry.get("test_summary"), dict):
        results = [{"status": entry["test_summary"].get("status"), "info": entry["test_summary"].get("info")}]
    for result in results:
        ids = _gpu_ids(result)
        outcome, note = _status(result.get("status"))
        warnings = _warnings(result.get("warnings"))
        info = [note] if note else []
        if outcome == "fail" and warnings and _deployment_software(category, name):
            if all(_is_persistence_mode(w) for w in warnings):
                # Persistence mode off fails DCGM's software test, yet the GPU is sound; failing
                # it drained every node of a lab that runs without it.
                outcome = "warn"
                info.append("only persistence mode failed (counted as a warning)")
        elif outcome == "fail" and warnings and all(w["error_severity"] == DCGM_ERROR_MONITOR for w in warnings):
            outcome = "warn"
            info.append("DCGM rates every finding 'monitor': the GPU can take work, watch it (counted as a warning)")
        if outcome == "fail" and _deployment_software(category, name) and name.lower() == "persistence mode":
            outcome = "warn"
            info.append("only persistence mode failed (counted as a warning)")
        for warning in warnings:
            severity = warning["error_severity"]
            tag = f" [severity {DCGM_SEVERITY.get(severity, severity)}]" if severity is not None else ""
            info.append(warning["warning"] + tag)
        info.extend(_texts(result.get("info")))
        text = "; ".join(part for part in info if part)
        for gpu in gpu_ids if ids is None else ids:
            if gpu in report.tests_by_gpu:
                report.tests_by_gpu[gpu].append(check(name, category or "DCGM", outcome, text))


def _deployment_software(category: str, name: str) -> bool:
    return category.lower() in ("deployment", "software") and name.lower() in ("software", "persistence mode")


@dataclass
class ProcessOutcome:
    returncode: int | None  # None: stopped at the time limit or by the agent
    stdout: str
    stderr: str
    stopped: str = ""


def run_process(argv: list[str], *, time_limit_s: float, stop: threading.Event | None = None) -> ProcessOutcome:
    """Run argv (never a shell) in its own process group; stop all of it at the time limit or
    when `stop` is set."""
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    result: dict[str, str] = {}

    def communicate() -> None:
        out, err = process.communicate()
        result["out"], result["err"] = out, err

    reader = threading.Thread(target=communicate, name="diag-output", daemon=True)
    reader.start()
    deadline = time.monotonic() + time_limit_s
    stopped = ""
    while reader.is_alive():
        reader.join(timeout=0.2)
        if not reader.is_alive():
            break
        if stop is not None and stop.is_set():
            stopped = "the agent was stopped"
        elif time.monotonic() >= deadline:
            stopped = f"time limit of {_duration(time_limit_s)} reached"
        if stopped:
            _kill_group(process)
            reader.join(timeout=10)
            break
    return ProcessOutcome(
        None if stopped else process.returncode, result.get("out", ""), result.get("err", ""), stopped
    )


def _kill_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _first_lines(text: str, count: int = STDERR_LINES) -> str:
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[:count]) or "(empty)"


# --- one diagnostic -----------------------------------------------------------------------------


@dataclass
class Runner:
    """Runs diagnostics on this host. `dcgmi`: the dcgmi executable found on PATH, or None
    (no DCGM: NVML checks at level 1, skip at 2-3)."""

    device: DeviceClient
    dcgmi: str | None = None
    xids: XidLog | None = None
    known_uuids: Callable[[], dict[int, str]] | None = None  # index -> uuid of the GPUs seen so far
    time_limits: dict[int, float] = field(default_factory=lambda: dict(LEVEL_TIME_LIMIT_S))
    clock: Callable[[], float] = time.time

    def run(
        self,
        level: int,
        uuids: list[str] | None,
        *,
        stop: threading.Event | None = None,
        started_at: float | None = None,
    ) -> dict[str, Any]:
        if level not in LEVELS:
            raise ValueError(f"level must be 1, 2 or 3, not {level!r}")
        started = self.clock() if started_at is None else started_at
        system = self.device.system_info()
        targets = resolve_targets(self.device, uuids, self.known_uuids() if self.known_uuids else None)
        if self.dcgmi:
            tool = "dcgmi"
            tool_version, driver, gpus = self._run_dcgmi(level, targets, stop)
        elif level == 1:
            tool, tool_version, driver = "nvml", system.get("nvml_version"), None
            gpus = [gpu_entry(t.uuid, nvml_checks(self.device, t, self.xids)) for t in targets]
            if self.xids is not None:
                # The XID check looked up to here: the next one counts from this run's start.
                self.xids.mark([t.uuid for t in targets], started)
        else:
            tool, tool_version, driver = "nvml", system.get("nvml_version"), None
            reason = (
                f"level {level} needs DCGM (dcgmi diag -r {level}), which is not installed on this host; "
                "the agent's own NVML checks cover level 1 only"
            )
            gpus = [gpu_entry(t.uuid, [check(f"dcgmi diag -r {level}", "Deployment", "skip", reason)]) for t in targets]
        return {
            "started_at": rfc3339(started),
            "finished_at": rfc3339(self.clock()),
            "tool": tool,
            "tool_version": _bounded(tool_version),
            # The driver the host reports now: the portal compares it with the one at return to service.
            "driver_version": _bounded(system.get("driver_version") or driver),
            "gpus": gpus,
        }

    def _run_dcgmi(
        self, level: int, targets: list[Target], stop: threading.Event | None
    ) -> tuple[str | None, str | None, list[dict[str, Any]]]:
        assert self.dcgmi
        present = [t for t in targets if t.index is not None]
        gpus_absent = {t.uuid: [check("GPU answers", "Deployment", "fail", "this host has no GPU with this uuid")]
                       for t in targets if t.index is None}  # fmt: skip
        if not present:
            return None, None, [gpu_entry(uuid, tests) for uuid, tests in gpus_absent.items()]
        indices = [t.index for t in present if t.index is not None]
        argv = [self.dcgmi, "diag", "-r", str(int(level)), "-j", "-i", ",".join(str(int(i)) for i in indices)]
        name = f"dcgmi diag -r {level}"
        try:
            outcome = run_process(argv, time_limit_s=self.time_limits[level], stop=stop)
        except OSError as exc:
            error = check(name, "Deployment", "fail", f"dcgmi could not be started: {exc}")
            return None, None, self._entries(targets, gpus_absent, lambda t: [error])
        if outcome.stopped and stop is not None and stop.is_set():
            raise Interrupted(f"{name} stopped with the agent")
        if outcome.stopped:
            info = f"{outcome.stopped}; dcgmi was stopped before it finished. stderr: {_first_lines(outcome.stderr)}"
            error = check(name, "Deployment", "fail", info)
            return None, None, self._entries(targets, gpus_absent, lambda t: [error])
        try:
            report = parse_dcgm(outcome.stdout, indices)
        except DcgmDocumentError as exc:
            info = (
                f"dcgmi exited with code {outcome.returncode} without a diagnostic document ({exc}); "
                f"stderr: {_first_lines(outcome.stderr)}"
            )
            error = check(name, "Deployment", "fail", info)
            return None, None, self._entries(targets, gpus_absent, lambda t: [error])
        if report.runtime_error:
            error = check(name, "Deployment", "fail", f"DCGM runtime error: {report.runtime_error}")
            entries = self._entries(targets, gpus_absent, lambda t: [error, *report.tests_by_gpu.get(t.index, [])])
            return report.tool_version, report.driver_version, entries

        def tests_of(target: Target) -> list[dict[str, str]]:
            tests = report.tests_by_gpu.get(target.index, [])
            if not tests:
                return [check(name, "Deployment", "fail", f"dcgmi reported nothing on GPU {target.index}")]
            return tests

        return report.tool_version, report.driver_version, self._entries(targets, gpus_absent, tests_of)

    @staticmethod
    def _entries(targets, absent, tests_of) -> list[dict[str, Any]]:
        return [gpu_entry(t.uuid, absent[t.uuid] if t.uuid in absent else tests_of(t)) for t in targets]


def _bounded(text: str | None, limit: int = 100) -> str | None:
    return None if text is None else str(text)[:limit]


def format_human(document: dict[str, Any]) -> str:
    """The result as lines for a person at the terminal."""
    version = document.get("tool_version") or "?"
    lines = [
        f"{document['tool']} {version}, driver {document.get('driver_version') or '?'}: "
        f"{document['started_at']} to {document['finished_at']}"
    ]
    for gpu in document["gpus"]:
        lines.append(f"{gpu['uuid']}: {gpu['result'].upper()}")
        for item in gpu["tests"]:
            info = f": {item['info']}" if item["info"] else ""
            lines.append(f"  {item['result']:<4}  {item['category']} / {item['name']}{info}")
    return "\n".join(lines)


def overall(document: dict[str, Any]) -> str:
    """What the portal will make of it: passed (every GPU pass or warn), else failed/skipped."""
    results = [gpu["result"] for gpu in document["gpus"]]
    if results and all(r in ("pass", "warn") for r in results):
        return "warned" if "warn" in results else "passed"
    return "failed" if "fail" in results else "not passed"
