"""Protocol ingest-v1, written out from /work/shared/protocol/ingest-v1.md on purpose rather than
taken from the agent's own field lists, so that a drift between the two shows up in the tests."""

from __future__ import annotations

import re
from datetime import datetime

INT, NUM, STR, BOOL, LIST = "int", "number", "str", "bool", "list"
HOST_FIELDS = {
    "hostname": STR,
    "agent_version": STR,
    "driver_version": STR,
    "cuda_driver_version": STR,
    "nvml_version": STR,
}
GPU_FIELDS = {
    "uuid": STR,
    "index": INT,
    "name": STR,
    "serial": STR,
    "pci_bus_id": STR,
    "vbios_version": STR,
    "memory_total_mib": INT,
    "power_limit_default_w": NUM,
    "temp_slowdown_c": INT,
    "temp_shutdown_c": INT,
    "pcie_link_gen_max": INT,
    "pcie_link_width_max": INT,
}
READING_FIELDS = {
    "gpu_uuid": STR,
    "ts": STR,
    "temperature_c": NUM,
    "fan_speed_pct": NUM,
    "power_w": NUM,
    "power_limit_w": NUM,
    "energy_mj": NUM,
    "utilization_gpu_pct": NUM,
    "utilization_memory_pct": NUM,
    "memory_used_mib": INT,
    "sm_clock_mhz": INT,
    "mem_clock_mhz": INT,
    "pstate": INT,
    "throttle_reasons": LIST,
    "ecc_corrected_volatile": INT,
    "ecc_uncorrected_volatile": INT,
    "ecc_uncorrected_aggregate": INT,
    "retired_pages_pending": BOOL,
    "remapped_rows_pending": BOOL,
    "remapped_rows_failure": BOOL,
    "pcie_link_gen": INT,
    "pcie_link_width": INT,
    "pcie_replay_count": INT,
    "xid_events": LIST,
}
# Optional reading fields: absent means "cannot tell" (an older agent).
READING_OPTIONAL = {"jobs": LIST}
JOB_KEY = re.compile(r"^(slurm:\d+|k8s:[!-~]+/[!-~]+|user:[!-~]+)$")
MAX_JOBS = 16
PERCENT_FIELDS = ("fan_speed_pct", "utilization_gpu_pct", "utilization_memory_pct")
THROTTLE_REASONS = {
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks_setting",
}
# Optional host fields this agent adds (compatible extension, see agents/README.md).
HOST_EXTRA = {"dropped_batches": INT, "rejected_batches": INT}
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _type_ok(value, kind) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, {STR: str, BOOL: bool, LIST: list}[kind])


def _check_fields(obj: dict, spec: dict, where: str, required: set[str], problems: list[str]) -> None:
    for key, value in obj.items():
        if key not in spec:
            problems.append(f"{where}.{key}: not a protocol field")
        elif value is None:
            if key in required:
                problems.append(f"{where}.{key}: must not be null")
        elif not _type_ok(value, spec[key]):
            problems.append(f"{where}.{key}: {value!r} is not {spec[key]}")
    problems.extend(f"{where}.{key}: missing" for key in spec.keys() - obj.keys() if key in required)


def protocol_problems(batch: dict, *, all_fields: bool = True) -> list[str]:
    """Everything in `batch` that ingest-v1 would refuse (names, types, ranges, timestamps)."""
    problems: list[str] = []
    for key in batch:
        if key not in ("batch_id", "sent_at", "host", "gpus", "readings"):
            problems.append(f"{key}: not a protocol field")
    if not isinstance(batch.get("batch_id"), str):
        problems.append("batch_id: missing")
    if "sent_at" in batch and not RFC3339.match(batch["sent_at"]):
        problems.append("sent_at: not RFC 3339 with zone")
    _check_fields(batch.get("host", {}), HOST_FIELDS | HOST_EXTRA, "host", {"hostname"}, problems)
    for i, gpu in enumerate(batch.get("gpus", [])):
        _check_fields(gpu, GPU_FIELDS, f"gpus.{i}", {"uuid", "index"}, problems)
        if all_fields and GPU_FIELDS.keys() - gpu.keys():
            problems.append(f"gpus.{i}: fields absent instead of null: {sorted(GPU_FIELDS.keys() - gpu.keys())}")
    for i, reading in enumerate(batch.get("readings", [])):
        where = f"readings.{i}"
        _check_fields(reading, READING_FIELDS | READING_OPTIONAL, where, {"gpu_uuid", "ts", "xid_events"}, problems)
        missing = READING_FIELDS.keys() - reading.keys()
        if missing:
            problems.append(f"{where}: fields absent instead of null: {sorted(missing)}")
        if isinstance(reading.get("ts"), str) and not RFC3339.match(reading["ts"]):
            problems.append(f"{where}.ts: not RFC 3339 with zone")
        for key in PERCENT_FIELDS:
            value = reading.get(key)
            if isinstance(value, int | float) and not 0 <= value <= 100:
                problems.append(f"{where}.{key}: {value} outside 0-100")
        for name in reading.get("throttle_reasons") or []:
            if name not in THROTTLE_REASONS:
                problems.append(f"{where}.throttle_reasons: unknown {name!r}")
        jobs = reading.get("jobs") or []
        if len(jobs) > MAX_JOBS:
            problems.append(f"{where}.jobs: {len(jobs)} keys, at most {MAX_JOBS}")
        for j, key in enumerate(jobs):
            if not (isinstance(key, str) and JOB_KEY.match(key) and len(key) <= 128):
                problems.append(f"{where}.jobs.{j}: {key!r} is not a job key")
        for j, event in enumerate(reading.get("xid_events") or []):
            if set(event) != {"ts", "code"} or not RFC3339.match(str(event["ts"])) or not _type_ok(event["code"], INT):
                problems.append(f"{where}.xid_events.{j}: {event!r} is not {{ts, code}}")
    return problems


def parse_ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# portal-api-v1 "Diagnostics and return to service": what an agent posts to
# POST /api/v1/diagnostics/{id}/result.
RESULTS = {"pass", "warn", "fail", "skip"}


def diagnostic_result_problems(document: dict) -> list[str]:
    problems = []
    expected = {"started_at", "finished_at", "tool", "tool_version", "driver_version", "gpus"}
    if set(document) != expected:
        problems.append(f"keys {sorted(document)} are not {sorted(expected)}")
        return problems
    for key in ("started_at", "finished_at"):
        try:
            parse_ts(document[key])
        except (TypeError, ValueError):
            problems.append(f"{key}: not an RFC 3339 UTC time: {document[key]!r}")
    if not problems and parse_ts(document["finished_at"]) < parse_ts(document["started_at"]):
        problems.append("finished_at is before started_at")
    if document["tool"] not in ("dcgmi", "nvml"):
        problems.append(f"tool: {document['tool']!r}")
    for key in ("tool_version", "driver_version"):
        if document[key] is not None and not isinstance(document[key], str):
            problems.append(f"{key}: not a string")
    if not isinstance(document["gpus"], list):
        return [*problems, "gpus: not a list"]
    for i, gpu in enumerate(document["gpus"]):
        if set(gpu) != {"uuid", "result", "tests"}:
            problems.append(f"gpus.{i}: keys {sorted(gpu)}")
            continue
        if gpu["result"] not in RESULTS:
            problems.append(f"gpus.{i}.result: {gpu['result']!r}")
        for j, test in enumerate(gpu["tests"]):
            if set(test) != {"name", "category", "result", "info"}:
                problems.append(f"gpus.{i}.tests.{j}: keys {sorted(test)}")
            elif test["result"] not in RESULTS or not all(isinstance(test[k], str) for k in test):
                problems.append(f"gpus.{i}.tests.{j}: {test!r}")
    return problems
