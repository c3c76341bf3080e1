"""Record what NVML answers on a real GPU host, for the agent's tests.

    python -m agents.record_nvml OUTDIR [--load-seconds N]

Writes, for each phase (`idle`, and `load` while a matrix product keeps the GPUs busy when
PyTorch is there):
- `real_gpu_<model>_<phase>.json`: the batch the agent builds (as `--once --stdout` prints it);
- `real_nvml_<model>_<phase>.json`: every NVML call the agent made and what NVML answered
  (values, structures as their fields, errors as NVML's error codes), in call order.

The tests replay the calls through the agent's NVML client and must get the recorded batch back,
so the mapping from NVML to the protocol is checked against a real GPU's answers. Nothing here
is needed to run the agent.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agents.agent import Agent
from agents.collector import Collector, rfc3339
from agents.device import NvmlDeviceClient

# The XID watch waits on NVML in a loop; its timeouts say nothing after the first few.
REPEATED_CALLS_KEPT = 3
REPEATED_CALLS = {"nvmlEventSetWait"}


def plain(value: Any) -> Any:
    """NVML's answer as JSON: ctypes structures by field, bytes as text, tuples as lists."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {"__struct__": type(value).__name__} | {name: plain(getattr(value, name)) for name, *_ in fields}
    return {"__repr__": repr(value)}


class RecordingNvml:
    """The real pynvml, with every call the agent makes written down."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._tokens: dict[int, str] = {}
        self.calls: list[dict[str, Any]] = []
        self._repeats: dict[str, int] = {}
        self.recording = True

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if not name.startswith("nvml") or not callable(target):
            return target

        def call(*args: Any) -> Any:
            record = {"function": name, "args": [self._token(a) for a in args]}
            started = time.perf_counter()
            try:
                value = target(*args)
            except self._nvml.NVMLError as exc:
                record["error"] = exc.value
                record["error_class"] = type(exc).__name__
                self._keep(name, record, started)
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                self._tokens[id(value)] = f"handle:{args[0]}"
            elif name == "nvmlEventSetCreate":
                self._tokens[id(value)] = "event_set"
            record["value"] = self._token(value)
            self._keep(name, record, started)
            return value

        return call

    def _token(self, value: Any) -> Any:
        token = self._tokens.get(id(value))
        return token if token is not None else plain(value)

    def _keep(self, name: str, record: dict[str, Any], started: float) -> None:
        if not self.recording:
            return
        record["ms"] = round((time.perf_counter() - started) * 1000, 3)
        if name in REPEATED_CALLS:
            self._repeats[name] = self._repeats.get(name, 0) + 1
            if self._repeats[name] > REPEATED_CALLS_KEPT:
                return
        self.calls.append(record)


LOAD_SCRIPT = """
import sys, time, torch
end = time.time() + float(sys.argv[1])
devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
pairs = [(torch.randn(8192, 8192, device=d, dtype=torch.bfloat16),) * 2 for d in devices]
while time.time() < end:
    for a, b in pairs:
        a @ b
    for d in devices:
        torch.cuda.synchronize(d)
"""


def model_slug(name: str | None) -> str:
    words = re.findall(r"[a-z0-9]+", (name or "gpu").lower())
    return "_".join(w for w in words if w not in ("nvidia",)) or "gpu"


def record_phase(pynvml: Any, outdir: Path, phase: str, hostname: str) -> dict[str, Any]:
    recorder = RecordingNvml(pynvml)
    device = NvmlDeviceClient(nvml=recorder)
    try:
        collector = Collector(device)
        agent = Agent(collector=collector, hostname=hostname, spool=None, batch_interval_s=0, max_batch_readings=10_000)
        batches = agent.collect()
        batch = batches[0]
        batch["sent_at"] = rfc3339(time.time())
        recorder.recording = False
        # What one interval costs the host, once the inventory is read.
        timings = []
        for _ in range(20):
            started = time.perf_counter()
            collector.collect()
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        device.close()
    slug = model_slug(batch["gpus"][0]["name"] if batch.get("gpus") else None)
    (outdir / f"real_gpu_{slug}_{phase}.json").write_text(json.dumps(batch, indent=2) + "\n")
    recording = {
        "recorded_at": rfc3339(time.time()),
        "nvidia_ml_py": getattr(pynvml, "__version__", None) or _package_version("nvidia-ml-py"),
        "phase": phase,
        "calls": recorder.calls,
    }
    (outdir / f"real_nvml_{slug}_{phase}.json").write_text(json.dumps(recording, indent=1) + "\n")
    timings.sort()
    return {
        "phase": phase,
        "gpus": len(batch.get("gpus", [])),
        "collect_ms_median": round(timings[len(timings) // 2], 2),
        "collect_ms_max": round(timings[-1], 2),
    }


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--load-seconds", type=float, default=25.0)
    parser.add_argument("--hostname", default="recorded-host")
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    import pynvml

    summary = [record_phase(pynvml, args.outdir, "idle", args.hostname)]
    load = None
    try:
        load = subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT, str(args.load_seconds)])
    except OSError as exc:
        print(f"no load phase: {exc}", file=sys.stderr)
    if load is not None:
        time.sleep(min(10.0, args.load_seconds / 2))  # clocks and power ramp up
        if load.poll() is None:
            summary.append(record_phase(pynvml, args.outdir, "load", args.hostname))
        else:
            print(f"no load phase: the load exited with {load.returncode}", file=sys.stderr)
        load.wait()
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
