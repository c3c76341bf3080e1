"""CPU time and peak RSS of one 8-GPU collection by the agent, against nvidia-smi subprocesses.

    .venv/bin/python bench/agent.py

The agent side runs against the stand-in pynvml (tests/agents/fakenvml), so its figures are
the agent's own Python overhead; on a GPU host, NVML's driver calls come on top. The
nvidia-smi side runs only where nvidia-smi exists.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "agents" / "fakenvml"))
sys.path.insert(0, str(REPO))

import pynvml  # noqa: E402  (the stand-in, from the path above)

from agents.agent import Agent  # noqa: E402
from agents.collector import Collector  # noqa: E402
from agents.device import NvmlDeviceClient  # noqa: E402
from agents.spool import Spool  # noqa: E402

GPUS = 8
ROUNDS = 2000
SMI_ROUNDS = 20
TARGET_CPU_MS = 2.0
TARGET_RSS_MB = 40.0
SMI_QUERY = ",".join(
    [
        "uuid",
        "temperature.gpu",
        "fan.speed",
        "power.draw",
        "power.limit",
        "utilization.gpu",
        "utilization.memory",
        "memory.used",
        "clocks.sm",
        "clocks.mem",
        "pstate",
        "clocks_event_reasons.active",
        "ecc.errors.corrected.volatile.total",
        "ecc.errors.uncorrected.volatile.total",
        "ecc.errors.uncorrected.aggregate.total",
        "retired_pages.pending",
        "pcie.link.gen.current",
        "pcie.link.width.current",
    ]
)


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def bench_agent() -> dict[str, float]:
    pynvml.fake_reset(count=GPUS)
    client = NvmlDeviceClient()
    collector = Collector(client)
    for _ in range(50):  # warm up
        collector.collect()
    start = time.process_time()
    for _ in range(ROUNDS):
        collector.collect()
    collect_ms = (time.process_time() - start) / ROUNDS * 1000

    # The whole cycle of the daemon: collect, build the batch, write it to the spool (fsync'd).
    with tempfile.TemporaryDirectory() as spool_dir:
        spool = Spool(spool_dir)
        agent = Agent(collector=collector, hostname="bench", spool=spool, batch_interval_s=0)
        rounds = 200
        start = time.process_time()
        for _ in range(rounds):
            agent.collect()
        cycle_ms = (time.process_time() - start) / rounds * 1000
        spool.close()
    pynvml.calls = 0
    collector.collect()
    calls_per_collection = pynvml.calls
    client.close()
    return {"cpu_ms": collect_ms, "cycle_ms": cycle_ms, "rss_mb": peak_rss_mb(), "nvml_calls": calls_per_collection}


def bench_nvidia_smi() -> dict[str, float] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    command = [smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(SMI_ROUNDS):
        subprocess.run(command, capture_output=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_ms": cpu_s / SMI_ROUNDS * 1000, "rss_mb": peak_rss_mb(resource.RUSAGE_CHILDREN)}


def main() -> int:
    agent = bench_agent()
    smi = bench_nvidia_smi()
    print(
        f"8-GPU collection, {ROUNDS} rounds (agent against the stand-in pynvml, "
        f"{agent['nvml_calls']} NVML calls per collection)"
    )
    print(f"{'':28}{'agent':>12}{'nvidia-smi':>14}{'ratio smi/agent':>18}{'target':>10}")
    smi_cpu = f"{smi['cpu_ms']:.2f}" if smi else "-"
    smi_rss = f"{smi['rss_mb']:.1f}" if smi else "-"
    cpu_ratio = f"{smi['cpu_ms'] / agent['cpu_ms']:.0f}x" if smi else "-"
    rss_ratio = f"{smi['rss_mb'] / agent['rss_mb']:.1f}x" if smi else "-"
    print(f"{'CPU per collection (ms)':28}{agent['cpu_ms']:>12.3f}{smi_cpu:>14}{cpu_ratio:>18}{'< 2':>10}")
    print(f"{'  + batch and spool (ms)':28}{agent['cycle_ms']:>12.3f}{'':>14}{'':>18}{'':>10}")
    print(f"{'peak RSS (MB)':28}{agent['rss_mb']:>12.1f}{smi_rss:>14}{rss_ratio:>18}{'< 40':>10}")
    if smi is None:
        print("nvidia-smi: skipped: nvidia-smi not found")
    ok = agent["cpu_ms"] < TARGET_CPU_MS and agent["rss_mb"] < TARGET_RSS_MB
    print(json.dumps({"agent": agent, "nvidia_smi": smi, "targets_met": ok}))
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
