"""The agent's collection cadence while diagnostics run beside it: interval jitter with no
diagnostic, with level-1 diagnostics, and with a level-3 one, side by side.

    .venv/bin/python bench/agent_diagnose.py            # make bench-agent-diagnose
    BENCH_SECONDS=10 BENCH_ROUNDS=6 BENCH_INTERVAL=0.05 .venv/bin/python bench/agent_diagnose.py

Each phase runs the real daemon loop (`agents.daemon.push_batches`: collector, spool, sender
thread, diagnostics threads) on the simulator (8 GPUs) against the test suite's stand-in portal
(tests/agents/portal_stub.py, real HTTP on 127.0.0.1, in a process of its own as the portal is
on another machine: in the agent's process its request handling would compete with the agent for
the interpreter), collecting every BENCH_INTERVAL seconds;
the time of every collection is taken, and jitter is how far each interval between two
collections is from the nominal one. Beside it, the wall time of each collection itself
(`Collector.collect`): a diagnostic that held the collecting thread up (the GIL, a lock, I/O)
would show there, while the interval jitter also carries the machine's scheduling of the whole
process.
- none: no command.
- level 1: the portal offers a new level-1 command as soon as the last one reported its
  result, so level-1 runs (the agent's NVML checks, no DCGM) follow each other back to back,
  each with its started and result posts.
- level 3: one level-3 command run by a stand-in `dcgmi` that sleeps for longer than the phase
  (DCGM's simulated duration; on a real host nv-hostengine and the GPU do the work in other
  processes, which this does not model), stopped with the agent at the end of the phase.
The phases alternate (none, 1, 3, none, 1, 3, ...) so that a change in the machine's load
falls on all of them alike. Target: p99 jitter with a diagnostic within 10 % of without
(or within 1 ms, below which a shared machine's scheduler noise dominates).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "agents"))
sys.path.insert(0, str(REPO))

from portal_stub import PortalStub  # noqa: E402

from agents.collector import Collector  # noqa: E402
from agents.config import load_config  # noqa: E402
from agents.daemon import open_device, push_batches  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "6"))
INTERVAL = float(os.environ.get("BENCH_INTERVAL", "0.05"))
GPUS = 8
TARGET_RATIO = 1.10
TARGET_SLACK_MS = 1.0

FAKE_DCGMI = """#!{python}
import sys, time
time.sleep({seconds})
sys.stdout.write(open({doc!r}).read())
"""


def serve_stub(control, kind: str) -> None:
    """The stand-in portal in a child process: sends its URL, offers the phase's commands (level 1:
    a new one as soon as the last reported its result), and at "stop" answers the count of
    diagnostics reported."""
    stub = PortalStub()
    if kind != "none":
        stub.commands.append({"id": str(uuid.uuid4()), "kind": "diagnose", "level": int(kind[-1]), "gpus": []})
    control.send(stub.url)
    while not control.poll(0.02):
        if kind == "level 1" and len(stub.results()) == len(stub.commands):
            stub.commands.append({"id": str(uuid.uuid4()), "kind": "diagnose", "level": 1, "gpus": []})
    control.recv()
    control.send(len(stub.results()) if kind == "level 1" else len(stub.diag_reports))
    stub.stop()


def phase(kind: str, workdir: Path) -> tuple[list[float], list[float], int]:
    """Run the daemon for SECONDS; returns the collection intervals, the collections' own wall
    times and the diagnostics reported."""
    control, child_end = multiprocessing.Pipe()
    portal = multiprocessing.Process(target=serve_stub, args=(child_end, kind), daemon=True)
    portal.start()
    url = control.recv()
    spool = workdir / f"spool-{uuid.uuid4().hex[:8]}"
    dcgmi = "none"
    if kind == "level 3":
        fake = workdir / "dcgmi"
        doc = REPO / "tests" / "agents" / "fixtures" / "dcgm" / "dcgm4_pass.json"
        fake.write_text(FAKE_DCGMI.format(python=sys.executable, seconds=SECONDS + 30, doc=str(doc)))
        fake.chmod(0o755)
        dcgmi = str(fake)
    config = load_config(
        ["--url", url, "--token", "tok", "--simulate", str(GPUS), "--hostname", "sim-bench-diag",
         "--interval", str(INTERVAL), "--spool-dir", str(spool), "--dcgmi", dcgmi, "--log-level", "ERROR"],
        environ={},
    )  # fmt: skip
    device = open_device(config)
    collector = Collector(device, inventory_refresh_s=config.inventory_refresh)
    stamps: list[float] = []
    durations: list[float] = []
    collect = collector.collect

    def timed_collect():
        began = time.perf_counter()
        stamps.append(began)
        try:
            return collect()
        finally:
            durations.append(time.perf_counter() - began)

    collector.collect = timed_collect
    stop = threading.Event()
    thread = threading.Thread(target=push_batches, args=(config, collector, stop), kwargs={"device": device})
    thread.start()
    time.sleep(SECONDS)
    stop.set()
    thread.join(timeout=30)
    device.close()
    control.send("stop")
    reported = control.recv()
    portal.join(timeout=10)
    # The first interval of a phase includes start-up; the last may be cut by the stop.
    intervals = [b - a for a, b in zip(stamps[1:-1], stamps[2:-1], strict=False)]
    return intervals, durations[1:-1], reported


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    logging.basicConfig(level=logging.ERROR)
    kinds = ["none", "level 1", "level 3"]
    intervals: dict[str, list[float]] = {k: [] for k in kinds}
    durations: dict[str, list[float]] = {k: [] for k in kinds}
    reported: dict[str, int] = dict.fromkeys(kinds, 0)
    print(f"{GPUS} simulated GPUs, collection every {INTERVAL * 1000:.0f} ms, {ROUNDS} rounds of {SECONDS:.0f} s "
          f"per phase; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(ROUNDS):
            for kind in kinds:
                got, took, count = phase(kind, Path(tmp))
                intervals[kind].extend(got)
                durations[kind].extend(took)
                reported[kind] += count
            print(f"  round {round_no + 1}/{ROUNDS} done; load {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for kind in kinds:
        jitter_ms = [abs(i - INTERVAL) * 1000 for i in intervals[kind]]
        rows.append(
            (
                kind,
                len(jitter_ms),
                statistics.median(jitter_ms),
                pct(jitter_ms, 0.99),
                max(jitter_ms),
                statistics.mean(intervals[kind]) * 1000,
                statistics.median(durations[kind]) * 1000,
                pct(durations[kind], 0.99) * 1000,
            )
        )
    base_p99 = rows[0][3]
    print()
    print(f"{'diagnostic':<12}{'intervals':>10}{'jitter p50':>12}{'p99':>9}{'max':>9}{'mean interval':>15}"
          f"{'p99 vs none':>13}{'collect p50':>13}{'p99':>9}{'diagnostics':>13}")  # fmt: skip
    ok = True
    for kind, count, p50, p99, worst, mean, took50, took99 in rows:
        ratio = p99 / base_p99 if base_p99 else float("inf")
        within = p99 <= base_p99 * TARGET_RATIO or p99 - base_p99 <= TARGET_SLACK_MS
        ok &= within
        done = "-" if kind == "none" else (f"{reported[kind]} reported" if kind == "level 1" else "1 running")
        print(f"{kind:<12}{count:>10}{p50:>10.2f}ms{p99:>7.2f}ms{worst:>7.1f}ms{mean:>13.2f}ms{ratio:>12.2f}x"
              f"{took50:>11.2f}ms{took99:>7.2f}ms{done:>13}")  # fmt: skip
    print()
    verdict = "met" if ok else "NOT met"
    print(f"target: p99 jitter within 10 % of 'none' (or within {TARGET_SLACK_MS:.0f} ms): {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
