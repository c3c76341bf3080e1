"""What the benchmarks share: Django in the bench's own process over a scratch database, the
portal served in a subprocess (`manage.py serve`, or `manage.py run` with worker and beat) for the
benches that talk to it over HTTP, the agents' batches they post, and the machine's load.

A bench script puts the repository on sys.path and imports this as `bench.harness`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import http.client
import json
import os
import secrets
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from portal.ops.supervise import ChildFailed, free_port, serving

REPO = Path(__file__).resolve().parents[1]


def django_setup(**env_defaults: str) -> tempfile.TemporaryDirectory | None:
    """Set Django up in this process and migrate the database: DATABASE_URL when it is set,
    else a throwaway SQLite database (VAR_DIR too) in the temporary folder returned, which goes
    when the object does (keep it for the bench's run). `env_defaults` are settings taken
    unless the environment sets them (DEBUG stays off unless they say otherwise, as in production;
    a random SECRET_KEY)."""
    tmp = None
    if not os.environ.get("DATABASE_URL"):
        tmp = tempfile.TemporaryDirectory()
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp.name}/bench.sqlite3"
        os.environ["VAR_DIR"] = tmp.name
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(16))  # DEBUG off wants one
    if "DJANGO_SETTINGS_MODULE" in env_defaults:
        # The bench's own settings module: importing portal (as this module does) already set the
        # portal's as a default, so a default here would never take.
        os.environ["DJANGO_SETTINGS_MODULE"] = env_defaults.pop("DJANGO_SETTINGS_MODULE")
    for name, value in env_defaults.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return tmp


@contextlib.contextmanager
def portal_served(
    env: dict[str, str], *, log: Path, workers: int = 1, timeout_s: float = 60, whole: bool = False
) -> Iterator[int]:
    """`manage.py serve` with env on a free loopback port until the block ends; yields the port
    once /healthz answers. `whole`: `manage.py run` instead (web server, worker and beat; the
    database already migrated). A portal that exits or does not answer ends the bench with the
    tail of its log."""
    port = free_port()
    env = {"PORTAL_URL": f"http://127.0.0.1:{port}", **env}  # DEBUG off wants the public base URL
    command = [sys.executable, str(REPO / "manage.py"), "run" if whole else "serve"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    if whole:
        command.append("--no-migrate")
    try:
        with serving(
            "the portal", command, url=f"http://127.0.0.1:{port}/healthz", env=env, log=log, cwd=REPO,
            timeout_s=timeout_s, stop_timeout_s=20,
        ):  # fmt: skip
            yield port
    except ChildFailed as error:
        raise SystemExit(f"{error}\n{log.read_text()[-3000:]}") from None


class CpuMeter:
    """CPU seconds each kind of process on this machine spent between start() and stop(), read
    from /proc (user + system time): the portal's web server, worker and beat, PostgreSQL, Redis,
    this bench (its clients), and the rest. Where a run's time goes, beside its figures."""

    KINDS = (("web", ("serve", "daphne")), ("worker", ("worker",)), ("beat", ("beat",)),
             ("PostgreSQL", ("postgres",)), ("Redis", ("redis-server",)))  # fmt: skip

    def __init__(self) -> None:
        self._tick = os.sysconf("SC_CLK_TCK")
        self._start: dict[int, tuple[str, float]] = {}
        self.seconds: dict[str, float] = {}
        self._began = 0.0
        self.wall = 0.0

    def _kind(self, pid: int, cmdline: str) -> str:
        if pid == os.getpid():
            return "bench (clients)"
        for kind, words in self.KINDS:
            if any(word in cmdline for word in words):
                return kind
        return "other"

    def _sample(self) -> dict[int, tuple[str, float]]:
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # gone meanwhile
            pid = int(entry)
            out[pid] = (self._kind(pid, cmdline), (int(fields[11]) + int(fields[12])) / self._tick)
        return out

    def start(self) -> None:
        self._start, self._began = self._sample(), time.monotonic()

    def stop(self) -> dict[str, float]:
        end, self.wall = self._sample(), time.monotonic() - self._began
        totals: dict[str, float] = {}
        for pid, (kind, used) in end.items():
            before = self._start.get(pid)
            totals[kind] = totals.get(kind, 0.0) + used - (before[1] if before and before[0] == kind else 0.0)
        self.seconds = dict(sorted(totals.items(), key=lambda item: -item[1]))
        return self.seconds

    def line(self) -> str:
        """'web 12.3 s (45 %), …' of the CPU time all processes used, and how much of the cores that was."""
        used = sum(self.seconds.values())
        parts = ", ".join(f"{kind} {value:.1f} s ({value / used:.0%})" for kind, value in self.seconds.items()
                          if value >= 0.05)  # fmt: skip
        cores = used / self.wall / (os.cpu_count() or 1) if self.wall else 0.0
        return f"{parts}; {used:.1f} CPU s in {self.wall:.1f} s, {cores:.0%} of {os.cpu_count()} cores"


def machine_load() -> str:
    """The load average, printed beside a bench's figures (they depend on what else runs)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


# A reading's jobs (ingest-v1 `jobs`) when a bench asks for them: up to 4 keys, as a busy GPU
# shared by a Slurm job's processes, a pod and two users' processes would name.
JOB_KEYS = ("slurm:{gpu}4242", "k8s:lab/train-{gpu}", "user:ana", "user:bo")


def reading(uuid_: str, ts: dt.datetime, step: int, *, jobs: int = 0) -> dict:
    """One reading as an agent sends it: a GPU busy with a training job (no rule fires); with
    `jobs`, naming that many jobs (without, no `jobs` field: an older agent)."""
    out = _reading(uuid_, ts, step)
    if jobs:
        out["jobs"] = [key.format(gpu=uuid_[-2:]) for key in JOB_KEYS[:jobs]]
    return out


def _reading(uuid_: str, ts: dt.datetime, step: int) -> dict:
    return {
        "gpu_uuid": uuid_, "ts": ts.isoformat(), "temperature_c": 60 + step % 15, "fan_speed_pct": 40 + step % 30,
        "power_w": 300.0 + step % 100, "power_limit_w": 700.0, "energy_mj": 1e6 + step * 100.0,
        "utilization_gpu_pct": 90 + step % 10, "utilization_memory_pct": step % 60, "memory_used_mib": 40000,
        "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "pstate": 0, "throttle_reasons": ["sw_power_cap"],
        "ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
        "retired_pages_pending": False, "remapped_rows_pending": False, "remapped_rows_failure": False,
        "pcie_link_gen": 5, "pcie_link_width": 16, "pcie_replay_count": 0, "xid_events": [],
    }  # fmt: skip


def ingest_post(conn: http.client.HTTPConnection, token: str, body: bytes) -> tuple[int | str, bytes]:
    """POST one gzip batch to /api/v1/ingest on conn: (status, response body), or (the exception's
    name, b"") when the connection failed; conn is then closed and opens again on its next use."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Content-Encoding": "gzip"}
    try:
        conn.request("POST", "/api/v1/ingest", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as error:
        conn.close()
        return type(error).__name__, b""


def host_inventory(hostname: str, gpus: int, *, uuid_prefix: str = "") -> list[dict]:
    """The inventory of a bench host's `gpus` H200s (uuids stable per hostname and prefix)."""
    uuids = [f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{uuid_prefix}{hostname}-{i}')}" for i in range(gpus)]
    return [
        {"uuid": u, "index": i, "name": "NVIDIA H200", "serial": f"{hostname}-{i}", "vbios_version": "96.00.A5",
         "memory_total_mib": 143771, "power_limit_default_w": 700.0, "temp_slowdown_c": 90, "temp_shutdown_c": 95}
        for i, u in enumerate(uuids)
    ]  # fmt: skip


def batch_body(hostname: str, number: int, inventory: list[dict], readings: list[dict], sent_at: dt.datetime) -> bytes:
    """Batch `number` of a host as the agent sends it (gzip JSON); the first lists the GPUs."""
    batch = {
        "batch_id": str(uuid.uuid4()),
        "sent_at": sent_at.isoformat(),
        "host": {"hostname": hostname, "agent_version": "bench", "driver_version": "580.65.06"},
        "gpus": inventory if number == 0 else [],
        "readings": readings,
    }
    return gzip.compress(json.dumps(batch).encode(), compresslevel=1)


def host_bodies(
    hostname: str,
    count: int,
    start: dt.datetime,
    *,
    every: dt.timedelta,
    gpus: int = 10,
    per_gpu: int = 10,
    jobs: int = 0,
) -> list[bytes]:
    """count gzip batches of one host, in time order: `gpus` GPUs with `per_gpu` readings each,
    `every` apart (a batch takes up where the one before ended); the first lists the GPUs."""
    inventory = host_inventory(hostname, gpus)
    uuids = [gpu["uuid"] for gpu in inventory]
    bodies = []
    for number in range(count):
        readings = []
        for step in range(number * per_gpu, (number + 1) * per_gpu):
            ts = start + every * step
            readings.extend(reading(u, ts, step, jobs=jobs) for u in uuids)
        bodies.append(batch_body(hostname, number, inventory, readings, ts))
    return bodies
