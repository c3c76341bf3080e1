"""The agent's cost per collection (CPU, RSS, against nvidia-smi) and its catch-up after an outage.

    .venv/bin/python bench/agent.py            # both parts
    .venv/bin/python bench/agent.py catch-up   # only the catch-up part
    .venv/bin/python bench/agent.py catch-up --portal   # the same against the real portal
    .venv/bin/python bench/agent.py jobs       # only the cost of naming the GPUs' jobs, beside
                                               # the agent before jobs (git) and with no processes

Cost: the agent runs against the stand-in pynvml (tests/agents/fakenvml), so its figures are
the agent's own Python overhead; on a GPU host, NVML's driver calls come on top. The
nvidia-smi side runs only where nvidia-smi exists.

Catch-up: 8 GPUs read every 1 s; the portal is down for 10 minutes, then up. The agent is the
real one (collector, batches, fsync'd spool, sender thread with its default backoff, real HTTP
with gzip) against the test suite's stand-in portal (tests/agents/portal_stub.py: a real HTTP
server on 127.0.0.1 that stores batches idempotently by batch_id, as the portal does). The 10
minutes are simulated: the agent's clock is advanced 1 s per collection, so the 600
collections (4,800 readings) are spooled in a few seconds, while the sender keeps failing
against the closed port; its backoff is then set where 10 minutes of failures leave it (at its
cap), and the portal comes back at a random moment of the current wait. From then on
collections go on every real second. Measured from the portal's return: the first post
accepted, and every reading of the outage stored. Then the same through a portal answering 503
to a third of the posts (random, seeded). At the end every reading collected must have been
stored exactly once (by gpu uuid and timestamp).

With `--portal` the other end is the real portal (`manage.py serve` on SQLite in a scratch
VAR_DIR, DEBUG off, default ingest rate limits, one host token per trial) behind a small proxy
on 127.0.0.1 that refuses connections while "down" and answers 503 to a third of the posts in
the flaky part; the readings are counted in the portal's database.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import logging
import os
import random
import resource
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "agents" / "fakenvml"))
sys.path.insert(0, str(REPO / "tests" / "agents"))
sys.path.insert(0, str(REPO))

import pynvml  # noqa: E402  (the stand-in, from the path above)
from portal_stub import PortalStub  # noqa: E402

from agents.agent import Agent  # noqa: E402
from agents.collector import Collector  # noqa: E402
from agents.device import NvmlDeviceClient  # noqa: E402
from agents.jobs import JobNamer  # noqa: E402
from agents.push import Backoff, Deliverer, Sender  # noqa: E402
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


JOB_PROCESSES_PER_GPU = 4
JOBS_ROUNDS, JOBS_BLOCKS = 6000, 20  # per case; the cases differ by a few µs, the machine is shared
TARGET_JOBS_RATIO = 1.10


def _fake_proc(root: Path, pids: list[int]) -> None:
    """A /proc entry per pid as a Slurm job's process has it (cgroup v2, an environment)."""
    for pid in pids:
        base = root / str(pid)
        base.mkdir(parents=True)
        (base / "stat").write_text(f"{pid} (python) S {' '.join(['0'] * 18)} {pid * 7} 0\n")
        (base / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{pid // 10}/step_0/user/task_0\n")
        (base / "environ").write_bytes(b"HOME=/home/alice\0SLURM_JOB_ID=%d\0" % (pid // 10))


class _NoJobs(NvmlDeviceClient):
    """Today's device client without naming jobs: no process list, no /proc."""

    def running_jobs(self, indices):
        return {}


# main just before readings named jobs (the merge of agentjobs had it as its first parent).
PRE_JOBS_COMMIT = "fc0d3167d26861101f276d70299848a941db4aa7"


def _agent_before_jobs(scratch: Path):
    """The collector and NVML client as they were before readings named jobs, read from git at
    PRE_JOBS_COMMIT into a package of their own (`agents_prejobs`), so that they run beside
    today's in one process; None where this checkout has no such history (a source tarball)."""
    package = scratch / "agents_prejobs"
    package.mkdir()
    for name in ("__init__", "device", "collector"):
        try:
            done = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{PRE_JOBS_COMMIT}:agents/{name}.py"],  # noqa: S607
                capture_output=True, text=True, check=True,
            )  # fmt: skip
        except (OSError, subprocess.CalledProcessError):
            return None
        (package / f"{name}.py").write_text(done.stdout.replace("from agents.", "from agents_prejobs."))
    sys.path.insert(0, str(scratch))
    try:
        import agents_prejobs.collector as collector
        import agents_prejobs.device as device
    finally:
        sys.path.remove(str(scratch))
    return collector.Collector, device.NvmlDeviceClient


def bench_jobs(rounds: int = JOBS_ROUNDS, blocks: int = JOBS_BLOCKS) -> dict[str, float]:
    """CPU per 8-GPU collection, side by side in one run (alternating blocks, so that every case
    sees the same machine): the agent as it was before readings named jobs (from git), today's
    agent with naming switched off, today's agent on GPUs with no compute process, and today's
    agent with 4 compute processes on every GPU named through a /proc tree."""
    gpus = pynvml.fake_reset(count=GPUS)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "proc"
        pids = {gpu.index: [1000 + gpu.index * 10 + k for k in range(JOB_PROCESSES_PER_GPU)] for gpu in gpus}
        _fake_proc(root, [pid for group in pids.values() for pid in group])
        namer = JobNamer(proc_root=root, mapping_dir=Path(scratch) / "none")
        idle_namer = JobNamer(proc_root=root, mapping_dir=Path(scratch) / "none")
        before = _agent_before_jobs(Path(scratch))
        collectors = {}
        if before is not None:
            old_collector, old_client = before
            collectors["before"] = old_collector(old_client())
        collectors["no_naming"] = Collector(_NoJobs())
        collectors["no_processes"] = Collector(NvmlDeviceClient(job_namer=idle_namer))
        collectors["jobs"] = Collector(NvmlDeviceClient(job_namer=namer))

        def processes(case: str) -> None:
            for gpu in gpus:
                gpu.processes = [] if case == "no_processes" else pids[gpu.index]

        spent = dict.fromkeys(collectors, 0.0)
        for _block in range(blocks):
            for case, collector in collectors.items():
                processes(case)
                for _ in range(10):
                    collector.collect()
                start = time.process_time()
                for _ in range(rounds // blocks):
                    collector.collect()
                spent[case] += time.process_time() - start
        processes("jobs")
        jobs = collectors["jobs"].collect().readings[0]["jobs"]
        processes("no_processes")
        idle = collectors["no_processes"].collect().readings[0]["jobs"]
        for collector in collectors.values():
            collector._device.close()
    figures = {f"{case}_cpu_ms": spent[case] / rounds * 1000 for case in collectors}
    base = "before" if before is not None else "no_naming"
    figures["baseline"] = base
    figures["ratio"] = figures["jobs_cpu_ms"] / figures[f"{base}_cpu_ms"]
    figures["ratio_no_naming"] = figures["jobs_cpu_ms"] / figures["no_naming_cpu_ms"]
    figures["ratio_no_processes"] = figures["no_processes_cpu_ms"] / figures[f"{base}_cpu_ms"]
    figures["keys"], figures["idle_keys"] = len(jobs), len(idle)
    figures["rounds"], figures["blocks"] = rounds, blocks
    return figures


def print_jobs(figures: dict[str, float]) -> bool:
    ok = figures["ratio"] <= TARGET_JOBS_RATIO
    rounds, block = figures["rounds"], figures["rounds"] // figures["blocks"]
    print(f"\nNaming jobs: CPU per 8-GPU collection (ms), {rounds} rounds each, alternating blocks of {block}")
    columns = [
        ("before", "before jobs"), ("no_naming", "no naming"), ("no_processes", "0 processes"),
        ("jobs", f"8x{JOB_PROCESSES_PER_GPU} named"),
    ]  # fmt: skip
    columns = [(case, label) for case, label in columns if f"{case}_cpu_ms" in figures]
    print("".join(f"{label:>14}" for _, label in columns) + f"{'ratio':>10}{'target':>10}")
    print("".join(f"{figures[f'{case}_cpu_ms']:>14.3f}" for case, _ in columns)
          + f"{figures['ratio']:>10.3f}{'<= 1.10':>10}")  # fmt: skip
    baseline = "the agent before jobs (git " + PRE_JOBS_COMMIT[:8] + ")"
    if figures["baseline"] != "before":
        baseline = "today's agent without naming (no git history here to run the agent before jobs)"
    print(f"ratio: 8x{JOB_PROCESSES_PER_GPU} named / {baseline}; 0 processes / that: "
          f"{figures['ratio_no_processes']:.3f}; 8x{JOB_PROCESSES_PER_GPU} named / no naming: "
          f"{figures['ratio_no_naming']:.3f}")  # fmt: skip
    return ok


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


OUTAGE_S = 600
TARGET_CATCH_UP_S = 10.0
TARGET_CATCH_UP_FLAKY_S = 30.0
TRIALS = 3


class SimClock:
    """The agent's clock: 1 s per collection during the simulated outage, real time after."""

    def __init__(self, start: float) -> None:
        self.now = start
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def failures_after(outage_s: float, backoff: Backoff) -> int:
    """How many failed tries a sender makes in an outage this long (mean delays)."""
    probe = Backoff(initial_s=backoff.initial_s, max_s=backoff.max_s, rng=random.Random(1))
    spent = 0.0
    while spent < outage_s:
        spent += probe.next_delay()
    return probe.failures


class StubTarget:
    """The test suite's stand-in portal (tests/agents/portal_stub.py)."""

    name = "stand-in portal (tests/agents/portal_stub.py)"

    def __init__(self, seed: int, fail_ratio: float) -> None:
        self.stub = PortalStub()
        self.stub.stop()  # the portal is down
        self.stub.fail_ratio = fail_ratio
        self.stub.rng = random.Random(seed)
        self.url, self.token, self.hostname = self.stub.url, "tok", "bench"

    def up(self) -> None:
        self.stub.start()

    def calm(self) -> None:
        self.stub.fail_ratio = 0.0

    def stored(self) -> list[tuple[str, str]]:
        with self.stub.lock:
            return [(r["gpu_uuid"], r["ts"]) for body in self.stub.bodies for r in body.get("readings", [])]

    def posts(self) -> tuple[int, int]:
        return len(self.stub.attempts), self.stub.failed

    def close(self) -> None:
        self.stub.stop()


class FlakyProxy:
    """Between the agent and the real portal: refuses connections while down, answers 503 to
    `fail_ratio` of the posts, forwards the rest (status, body, Retry-After) unchanged."""

    def __init__(self, upstream_port: int, seed: int, fail_ratio: float) -> None:
        self.upstream_port, self.fail_ratio, self.rng = upstream_port, fail_ratio, random.Random(seed)
        self.posts = self.failed = 0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = _free_port()

    def up(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with proxy.lock:
                    proxy.posts += 1
                    fail = proxy.rng.random() < proxy.fail_ratio
                    proxy.failed += fail
                if fail:
                    return self._answer(503, b'{"error": "flaky proxy"}', {})
                connection = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                connection.request("POST", self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
                extra = {"Retry-After": answer.getheader("Retry-After")} if answer.getheader("Retry-After") else {}
                connection.close()
                return self._answer(answer.status, data, extra)

            def _answer(self, status, data, extra):
                self.send_response(status)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()


def _free_port() -> int:
    # Imported here, not at the top: importing the portal package loads Celery (and Django's
    # settings), which must not count in the agent's own RSS measured above.
    from portal.ops.supervise import free_port

    return free_port()


class RealPortal:
    """The portal itself (`manage.py serve`, SQLite in a scratch VAR_DIR, DEBUG off, default
    ingest rate limits), one per bench run; each trial gets its own host and GPUs."""

    def __init__(self) -> None:
        self.var_dir = Path(tempfile.mkdtemp(prefix="bench-agent-portal-"))
        drop = {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
        self.env = {k: v for k, v in os.environ.items() if k not in drop}
        self.env.update(
            VAR_DIR=str(self.var_dir), DEBUG="false", SECRET_KEY=secrets.token_urlsafe(50),
            ALLOWED_HOSTS="127.0.0.1,localhost", PLAIN_HTTP="true", LOG_LEVEL="WARNING",
        )  # fmt: skip
        from bench.harness import portal_served  # not at the top: see _free_port

        subprocess.run([sys.executable, str(REPO / "manage.py"), "migrate", "-v0"], cwd=REPO, env=self.env, check=True)
        self._served = contextlib.ExitStack()
        self.port = self._served.enter_context(
            portal_served(self.env, log=self.var_dir / "portal.log", workers=1, timeout_s=120)
        )

    def token(self, hostname: str) -> str:
        manage = [sys.executable, str(REPO / "manage.py"), "issue_token", hostname, "--label", "bench"]
        result = subprocess.run(manage, cwd=REPO, env=self.env, check=True, capture_output=True, text=True)
        return result.stdout.strip().splitlines()[-1]

    def stored(self, hostname: str) -> list[tuple[str, str]]:
        db = sqlite3.connect(self.var_dir / "portal.sqlite3", timeout=30)
        try:
            rows = db.execute(
                "SELECT g.uuid, r.ts FROM telemetry_reading r JOIN fleet_gpu g ON g.id = r.gpu_id "
                "JOIN fleet_host h ON h.id = g.host_id WHERE h.hostname = ?",
                (hostname,),
            ).fetchall()
        finally:
            db.close()
        return [(uuid, _rfc3339(ts)) for uuid, ts in rows]

    def close(self) -> None:
        self._served.close()
        shutil.rmtree(self.var_dir, ignore_errors=True)


def _rfc3339(ts: str) -> str:
    moment = dt.datetime.fromisoformat(ts)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class PortalTarget:
    def __init__(self, portal: RealPortal, seed: int, fail_ratio: float, trial: int) -> None:
        self.name = "the real portal (manage.py serve, SQLite) behind a proxy that fails posts"
        self.portal = portal
        self.proxy = FlakyProxy(portal.port, seed, fail_ratio)
        self.hostname = f"bench-agent-{trial}"
        self.token = portal.token(self.hostname)
        self.url = f"http://127.0.0.1:{self.proxy.port}"

    def up(self) -> None:
        self.proxy.up()

    def calm(self) -> None:
        self.proxy.fail_ratio = 0.0

    def stored(self) -> list[tuple[str, str]]:
        return self.portal.stored(self.hostname)

    def posts(self) -> tuple[int, int]:
        return self.proxy.posts, self.proxy.failed

    def close(self) -> None:
        self.proxy.close()


def catch_up_trial(target, seed: int, trial: int) -> dict[str, float]:
    rng = random.Random(seed)
    pynvml.fake_reset(
        gpus=[pynvml.FakeGpu(index=i, uuid=f"GPU-{trial:08x}-0000-4000-8000-{i:012d}") for i in range(GPUS)]
    )
    clock = SimClock(time.time() - OUTAGE_S - 5)
    created: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as spool_dir:
        spool = Spool(spool_dir)
        collector = Collector(NvmlDeviceClient(), clock=clock)
        agent = Agent(collector=collector, hostname=target.hostname, spool=spool, batch_interval_s=1.0, clock=clock)
        backoff = Backoff()  # the agent's defaults
        sender = Sender(url=target.url, token=target.token, timeout_s=10)
        deliverer = Deliverer(spool=spool, sender=sender, backoff=backoff)
        stop = threading.Event()
        sender_thread = threading.Thread(target=deliverer.run, args=(stop,), daemon=True)
        sender_thread.start()

        def collect_once() -> None:
            for batch in agent.collect():
                created.extend((r["gpu_uuid"], r["ts"]) for r in batch["readings"])
            deliverer.wake.set()

        started = time.monotonic()
        for _ in range(OUTAGE_S):
            clock.advance(1.0)
            collect_once()
        spool_s = time.monotonic() - started
        backlog = set(created)
        backoff.failures = max(backoff.failures, failures_after(OUTAGE_S, backoff))
        time.sleep(rng.uniform(0, backoff.max_s))  # the portal returns somewhere in a wait

        def live() -> None:  # collections go on every second, in real time
            while not stop.wait(1.0):
                clock.advance(1.0)
                collect_once()

        collector_thread = threading.Thread(target=live, daemon=True)
        collector_thread.start()
        target.up()
        up = time.monotonic()
        first_post = drained = None
        deadline = up + 120
        while time.monotonic() < deadline:
            stored = set(target.stored())
            if first_post is None and stored:
                first_post = time.monotonic() - up
            if backlog <= stored:
                drained = time.monotonic() - up
                break
            time.sleep(0.2)  # (the real portal's database is read here: not too often)
        stop.set()
        collector_thread.join()
        sender_thread.join(timeout=15)
        # Whatever the last collections added: delivered too, then nothing may be missing or doubled.
        target.calm()
        final = Deliverer(spool=spool, sender=Sender(url=target.url, token=target.token), backoff=Backoff())
        final.drain(max_seconds=60)
        stored_list = target.stored()
        spool.close()
    posts, failed = target.posts()
    target.close()
    return {
        "readings_in_outage": len(backlog),
        "spool_s": spool_s,
        "first_post_s": first_post if first_post is not None else float("inf"),
        "drained_s": drained if drained is not None else float("inf"),
        "posts": posts,
        "failed_posts": failed,
        "lost": len(set(created) - set(stored_list)),
        "stored_twice": len(stored_list) - len(set(stored_list)),
        "readings": len(created),
    }


def bench_catch_up(real_portal: bool = False) -> dict[str, list[dict[str, float]]]:
    logging.getLogger("agents").setLevel(logging.CRITICAL)  # the outage's retries, logged by design
    portal = RealPortal() if real_portal else None
    results: dict[str, list[dict[str, float]]] = {"down": [], "flaky": []}
    trial = 0
    try:
        for name, fail_ratio in (("down", 0.0), ("flaky", 1 / 3)):
            for seed in range(TRIALS):
                trial += 1
                target = PortalTarget(portal, seed, fail_ratio, trial) if portal else StubTarget(seed, fail_ratio)
                results[name].append(catch_up_trial(target, seed, trial))
        results["target"] = target.name
    finally:
        if portal:
            portal.close()
    return results


def print_catch_up(results: dict[str, list[dict[str, float]]]) -> bool:
    print(
        f"\nCatch-up: {GPUS} GPUs every 1 s, portal down {OUTAGE_S // 60} min, then up; over real HTTP to "
        f"{results['target']}; {TRIALS} trials each; backoff {Backoff().initial_s}-{Backoff().max_s} s"
    )
    print(f"{'':44}{'worst':>10}{'median':>10}{'target':>10}")
    ok = True
    for name, label, target in (
        ("down", "backlog delivered after the portal is up (s)", TARGET_CATCH_UP_S),
        ("flaky", "  same, 1 post in 3 answered 503 (s)", TARGET_CATCH_UP_FLAKY_S),
    ):
        trials = results[name]
        drained = sorted(t["drained_s"] for t in trials)
        first = sorted(t["first_post_s"] for t in trials)
        print(f"{label:44}{drained[-1]:>10.2f}{drained[len(drained) // 2]:>10.2f}{'< ' + str(int(target)):>10}")
        print(f"{'  first post accepted (s)':44}{first[-1]:>10.2f}{first[len(first) // 2]:>10.2f}{'':>10}")
        posts = max(t["posts"] for t in trials)
        failed = max(t["failed_posts"] for t in trials)
        print(f"{'  posts in all (503s among them)':44}{posts:>10}{'':>10}{'':>10}  ({failed} failed)")
        lost = sum(t["lost"] for t in trials)
        twice = sum(t["stored_twice"] for t in trials)
        print(f"{'  readings lost / stored twice':44}{f'{lost} / {twice}':>10}{'':>10}{'0 / 0':>10}")
        ok = ok and drained[-1] < target and lost == 0 and twice == 0
    spool_s = max(t["spool_s"] for name in ("down", "flaky") for t in results[name])
    print(f"(the outage's {results['down'][0]['readings_in_outage']} readings were spooled in {spool_s:.1f} s)")
    return ok


def main() -> int:
    if sys.argv[1:2] == ["catch-up"]:
        catch_up = bench_catch_up(real_portal="--portal" in sys.argv)
        ok = print_catch_up(catch_up)
        print(json.dumps({"catch_up": catch_up, "targets_met": ok}))
        print("targets met" if ok else "TARGETS MISSED")
        return 0 if ok else 1
    if sys.argv[1:2] == ["jobs"]:
        jobs = bench_jobs()
        ok = print_jobs(jobs)
        print(json.dumps({"jobs": jobs, "targets_met": ok}))
        print("targets met" if ok else "TARGETS MISSED")
        return 0 if ok else 1
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
    jobs = bench_jobs()
    ok = print_jobs(jobs) and ok
    catch_up = bench_catch_up()
    ok = print_catch_up(catch_up) and ok
    print(json.dumps({"agent": agent, "jobs": jobs, "nvidia_smi": smi, "catch_up": catch_up, "targets_met": ok}))
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
