"""Soak: the production cluster of deploy/ on this machine, simulated agents and faults.

Run with `make soak` (SOAK_SECONDS, default 600; SOAK_AGENTS, default 200). It starts, each
under a temporary folder and on its own ports, never touching the machine's own services:

- its own PostgreSQL (initdb + pg_ctl, unix socket in the folder) and its own Redis;
- Debian's nginx with deploy/nginx/gpu-fleet.conf (the upstream pointed at the web nodes, a
  throwaway self-signed certificate: nothing else changed), TLS in front;
- SOAK_WEB_NODES (2) web nodes, SOAK_WORKER_NODES (2) Celery worker nodes and one beat, each
  started by the ExecStart of its unit in deploy/systemd/ with the settings of
  deploy/portal.env.example (addresses, secrets and paths replaced), after `migrate`; like
  systemd (Restart=always, RestartSec) it starts again whatever exits;
- SOAK_AGENTS simulated agents (4 GPUs each, enrolled with host tokens from the services) that
  post ingest-v1 batches through nginx over HTTPS every SOAK_INTERVAL_S, one reading per GPU
  every SOAK_READING_S, and keep every batch until it is answered 202 or "duplicate" (resending
  the same batch_id, as the agent's spool does). A few GPUs run hot on purpose from 20 % of
  the run: each must get exactly one overheat ticket.

Faults at set fractions of the run: a web node SIGKILLed (the whole node: serve and its
Daphnes) and restarted later; a worker node SIGKILLed while it has work, restarted after its
unit's RestartSec; Redis stopped and started again (its queue lost: the portal's sweeps redo
the work); PostgreSQL restarted (`pg_ctl restart -m fast`); one agent cut off for 5 minutes
(half the run when shorter), catching up from its queue afterwards (its host also gets an
"agent silent" ticket: that host's threshold is set to a third of the cut).

At the end it waits for `GET /api/v1/pipeline` to show no backlog in any stage, then prints the
table (docs/production.md, "Soak") and exits 1 when a check fails. SOAK_REPORT=<file> also
writes it as JSON (tests/deploy/test_soak.py reads it). Everything it started is stopped on
exit or Ctrl-C, and a last look at /proc makes sure nothing is left.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import http.client
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import host_inventory, machine_load, reading  # noqa: E402
from portal.ops.supervise import die_with_parent, free_port  # noqa: E402

DEPLOY = ROOT / "deploy"
SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
AGENTS = int(os.environ.get("SOAK_AGENTS", "200"))
GPUS = int(os.environ.get("SOAK_GPUS_PER_HOST", "4"))
INTERVAL_S = float(os.environ.get("SOAK_INTERVAL_S", "5"))
READING_S = float(os.environ.get("SOAK_READING_S", "1"))
WEB_NODES = int(os.environ.get("SOAK_WEB_NODES", "2"))
WORKER_NODES = int(os.environ.get("SOAK_WORKER_NODES", "2"))
# The unit leaves `serve --workers` at one Daphne per core; on one machine shared by every node
# that is too many: this many per web node.
WEB_PROCESSES = int(os.environ.get("SOAK_WEB_PROCESSES", "2"))
WORKER_CONCURRENCY = os.environ.get("SOAK_WORKER_CONCURRENCY", "2")
DRAIN_TIMEOUT_S = float(os.environ.get("SOAK_DRAIN_TIMEOUT_S", "300"))
HOT_GPUS = max(2, AGENTS // 40)
RUN_MARK = "SOAK_RUN"  # in every child's environment: the last look for leftovers finds them by it
RSS_GROWTH_LIMIT = (2.0, 150 * 1024)  # flagged when end > 2 x start and grew by > 150 MiB (kB)


def say(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the faults, at fractions of the run -------------------------------------------------------


@dataclass
class Plan:
    seconds: float

    @property
    def cut(self) -> tuple[float, float]:  # the agent cut off: from, to
        return 0.10 * self.seconds, 0.10 * self.seconds + min(300.0, 0.5 * self.seconds)

    @property
    def web_kill(self) -> tuple[float, float]:  # killed at, restarted at
        return 0.15 * self.seconds, 0.15 * self.seconds + min(30.0, 0.1 * self.seconds)

    worker_kill_at = property(lambda self: 0.30 * self.seconds)
    redis_restart = property(lambda self: (0.45 * self.seconds, 0.45 * self.seconds + min(10.0, 0.05 * self.seconds)))
    postgres_restart_at = property(lambda self: 0.60 * self.seconds)
    hot_from = property(lambda self: 0.20 * self.seconds)

    @property
    def overheat_open_for_s(self) -> int:
        # The rule's 2 minutes, shorter when the run is: the hot GPUs stay hot 4 times as long.
        return int(min(120, 0.8 * self.seconds / 4))

    @property
    def silent_after_s(self) -> int:
        return max(5, int((self.cut[1] - self.cut[0]) / 3))


# --- processes ---------------------------------------------------------------------------------


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def tree(pid: int, kids: dict[int, list[int]] | None = None) -> list[int]:
    kids = kids if kids is not None else children_map()
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(kids.get(current, []))
    return found


def rss_kb(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total


def signal_tree(pid: int, sig: int) -> None:
    for member in tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, sig)


@dataclass
class Service:
    """A unit's process, supervised as systemd would (Restart=always after RestartSec)."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    restart_sec: float = 3.0
    process: subprocess.Popen | None = None
    held_until: float = 0.0  # a fault keeps it down until then
    restarts: int = 0
    unexpected_exits: int = 0
    rss_start_kb: int = 0
    started_at: float = 0.0
    exited_at: float | None = None
    killed: bool = False  # by a fault, not an exit of its own

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.command, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )
        self.started_at, self.exited_at = time.monotonic(), None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def pids(self) -> list[int]:
        return tree(self.process.pid) if self.running else []

    def kill(self) -> None:
        """SIGKILL the whole node (the process and its children), as a crashed machine."""
        if self.running:
            self.killed = True
            signal_tree(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 15.0) -> None:
        if not self.running:
            return
        pids = self.pids()
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)

    def supervise(self, now: float) -> None:
        if self.process is None or self.running or now < self.held_until:
            return
        if self.exited_at is None:
            self.exited_at = now
            if not self.killed:
                self.unexpected_exits += 1
                say(f"{self.name} exited by itself ({self.process.returncode}); restarts after {self.restart_sec:g} s")
        if self.held_until or now - self.exited_at >= self.restart_sec:
            self.held_until, self.killed = 0.0, False
            self.restarts += 1
            self.start()


def unit_command(unit: str, env: dict[str, str], instance: str = "") -> tuple[list[str], float]:
    """A unit's ExecStart with its ${VARS}, %i and %H filled in and /opt/gpu-fleet's paths pointed
    here, and its RestartSec."""
    text = (DEPLOY / "systemd" / unit).read_text()
    exec_start = re.search(r"^ExecStart=(.+)$", text, re.M).group(1)
    restart_sec = float(re.search(r"^RestartSec=(\d+)", text, re.M).group(1))
    exec_start = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], exec_start)
    exec_start = exec_start.replace("%i", instance).replace("%H", socket.gethostname())
    command = shlex.split(exec_start)
    venv_bin = Path(sys.executable).parent
    command = [
        arg.replace("/opt/gpu-fleet/.venv/bin/python", sys.executable)
        .replace("/opt/gpu-fleet/.venv/bin", str(venv_bin))
        .replace("/var/lib/gpu-fleet", env["VAR_DIR"])
        for arg in command
    ]  # fmt: skip
    if command[1:3] == ["manage.py", "serve"]:
        command[1] = str(ROOT / "manage.py")
    return command, restart_sec


def portal_env(tmp: Path, *, pg_port: int, redis_port: int, mark: str) -> dict[str, str]:
    """deploy/portal.env.example with this machine's addresses, a fresh secret and the folder's paths."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    for line in (DEPLOY / "portal.env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            env[name.strip()] = value.strip()
    env.update(
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{pg_port}/gpufleet",
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        VAR_DIR=str(tmp / "var"),
        MEDIA_ROOT=str(tmp / "media"),
        WEB_BIND="127.0.0.1",
        TRUST_PROXY_HEADERS="127.0.0.1/32",  # this machine's nginx
        WORKER_CONCURRENCY=WORKER_CONCURRENCY,
        # Beat's schedule 10 times faster (rollups every 3 s, the batch sweep every 3 s): a soak
        # of minutes sees what hours of the default schedule would.
        DJANGO_SETTINGS_MODULE="bench.settings_fast_beat",
        DEBUG="false",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    env[RUN_MARK] = mark
    return env


# --- PostgreSQL, Redis, nginx of its own -------------------------------------------------------


class Postgres:
    def __init__(self, tmp: Path, env: dict[str, str]):
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not bins:
            raise SystemExit("PostgreSQL's server binaries missing: apt-get install postgresql")
        self.bin = bins[-1].parent
        self.data, self.sock, self.log = tmp / "pg", tmp / "pg-socket", tmp / "postgres.log"
        self.port = free_port()
        self.env = env
        self.user = "postgres" if os.geteuid() == 0 else None  # initdb refuses to run as root

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]], env=self.env, user=self.user, capture_output=True, text=True,
            check=check, timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        for folder in (self.data, self.sock):
            folder.mkdir()
            if self.user:
                shutil.chown(folder, self.user)
        self.log.touch()
        if self.user:
            shutil.chown(self.log, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = (f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c max_connections=300 "
                   "-c fsync=off -c full_page_writes=off")  # fmt: skip
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
        self._run("createdb", "-h", str(self.sock), "-p", str(self.port), "-U", "postgres", "gpufleet")

    def restart(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w", "restart")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError, ValueError):
            return tree(int((self.data / "postmaster.pid").read_text().split()[0]))
        return []


def nginx_site(*, upstreams: list[int], https_port: int, http_port: int, cert: Path, key: Path, static: Path) -> str:
    """deploy/nginx/gpu-fleet.conf with the web nodes' ports, loopback listen addresses and the
    throwaway certificate; nothing else changed (as tests/deploy/test_nginx_site.py renders it)."""
    text = (DEPLOY / "nginx" / "gpu-fleet.conf").read_text()
    servers = "".join(f"    server 127.0.0.1:{port} max_fails=3 fail_timeout=10s;\n" for port in upstreams)
    text, count = re.subn(
        r"(upstream gpu_fleet_web \{\n\s+least_conn;\n)(\s+server [^\n]+\n)+", rf"\g<1>{servers}", text
    )
    assert count == 1, "the upstream block of deploy/nginx/gpu-fleet.conf changed shape"
    text = re.sub(r"\s+listen \[::\]:\d+[^;]*;", "", text)
    text = text.replace("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;")
    text = text.replace("listen 80;", f"listen 127.0.0.1:{http_port};")
    text = text.replace("/etc/ssl/certs/gpu-portal.pem", str(cert)).replace("/etc/ssl/private/gpu-portal.key", str(key))
    return text.replace("root /var/lib/gpu-fleet/staticfiles;", f"root {static};")


def nginx_main(prefix: Path, site: Path) -> str:
    user = "user root;" if os.geteuid() == 0 else ""
    return f"""
{user}
pid {prefix}/nginx.pid;
error_log {prefix}/nginx-error.log;
worker_processes 1;
worker_rlimit_nofile 8192;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/nginx-body;
    proxy_temp_path {prefix}/nginx-proxy;
    fastcgi_temp_path {prefix}/nginx-fastcgi;
    uwsgi_temp_path {prefix}/nginx-uwsgi;
    scgi_temp_path {prefix}/nginx-scgi;
    include /etc/nginx/mime.types;
    include {site};
}}
"""


# --- the agents --------------------------------------------------------------------------------


def tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the throwaway certificate
    return context


@dataclass
class Answers:
    """Every answer with its time (seconds into the run): (t, status or the error's name)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    items: list[tuple[float, int | str]] = field(default_factory=list)

    def add(self, t: float, status: int | str) -> None:
        with self.lock:
            self.items.append((t, status))


class Agent(threading.Thread):
    """One host's agent: a reading per GPU every READING_S, a batch every INTERVAL_S, kept in its
    queue until the portal answers 202 or duplicate (the same batch_id sent again)."""

    def __init__(self, number: int, hostname: str, token: str, port: int, run: Run, hot: set[int]):
        super().__init__(daemon=True, name=hostname)
        self.number, self.hostname, self.token, self.port, self.run_, self.hot = number, hostname, token, port, run, hot
        self.inventory = host_inventory(hostname, GPUS)
        self.queue: list[tuple[str, bytes, int]] = []  # (batch_id, gzip body, readings)
        self.generated: list[tuple[str, int]] = []  # (gpu uuid, ts in ms)
        self.refused: list[int | str] = []
        self.step = 0
        self.cut_sends = 0
        self.conn: http.client.HTTPSConnection | None = None
        self.rng = random.Random(number)

    def collect(self, until_ms: int) -> None:
        """The readings due up to until_ms, as one batch in the queue."""
        readings = []
        while self.next_ms <= until_ms:
            ts = dt.datetime.fromtimestamp(self.next_ms / 1000, dt.UTC)
            hot_now = self.next_ms / 1000 - self.run_.t0_wall >= self.run_.plan.hot_from
            for index, gpu in enumerate(self.inventory):
                row = reading(gpu["uuid"], ts, self.step)
                row["ts"] = ts.isoformat(timespec="milliseconds")
                if index in self.hot and hot_now:
                    row["temperature_c"] = 88  # >= slowdown (90) - 5: overheat opens after open_for_s
                readings.append(row)
                self.generated.append((gpu["uuid"], self.next_ms))
            self.step += 1
            self.next_ms += int(READING_S * 1000)
        if readings:
            batch_id = str(uuid.uuid4())
            batch = {
                "batch_id": batch_id, "sent_at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
                "host": {"hostname": self.hostname, "agent_version": "soak", "driver_version": "580.65.06"},
                "gpus": self.inventory, "readings": readings,
            }  # fmt: skip
            self.queue.append((batch_id, gzip.compress(json.dumps(batch).encode(), compresslevel=1), len(readings)))

    def post(self, body: bytes) -> int | str:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=tls_context())
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                   "Content-Encoding": "gzip"}  # fmt: skip
        try:
            self.conn.request("POST", "/api/v1/ingest", body=body, headers=headers)
            response = self.conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as error:
            self.conn.close()
            self.conn = None
            return type(error).__name__
        return response.status

    def run(self) -> None:
        run = self.run_
        self.next_ms = int(time.time() * 1000) // 1000 * 1000 + self.number % 1000  # agents' clocks differ
        backoff = 0.1
        next_batch = time.monotonic() + self.rng.uniform(0, INTERVAL_S)
        while True:
            now = time.monotonic()
            generating = not run.stop_generating.is_set()
            if generating and now >= next_batch:
                self.collect(int(time.time() * 1000))
                next_batch += INTERVAL_S
            cut = self.number == 0 and run.plan.cut[0] <= now - run.t0 < run.plan.cut[1]
            if self.queue and not cut:
                status = self.post(self.queue[0][1])
                run.answers.add(time.monotonic() - run.t0, status)
                if status in (200, 202):
                    self.queue.pop(0)
                    backoff = 0.1
                    continue  # a backlog goes out at once (the burst allows it)
                if isinstance(status, int) and 400 <= status < 500 and status != 429:
                    self.refused.append(status)  # the portal's verdict: set aside, counted as lost
                    self.queue.pop(0)
                    continue
                time.sleep(backoff * self.rng.uniform(0.5, 1.0))
                backoff = min(5.0, backoff * 2)
                continue
            if not generating and not self.queue:
                return
            time.sleep(max(0.0, min(0.25, next_batch - time.monotonic())) if generating else 0.25)


# --- the run -----------------------------------------------------------------------------------


@dataclass
class Run:
    plan: Plan
    t0: float = 0.0
    t0_wall: float = 0.0
    answers: Answers = field(default_factory=Answers)
    stop_generating: threading.Event = field(default_factory=threading.Event)
    outages: list[tuple[str, float, float]] = field(default_factory=list)  # (what, from, to) seconds
    lag: list[tuple[float, float]] = field(default_factory=list)  # (t, the largest lag of any stage)
    lag_failed: int = 0
    events: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        line = f"{time.monotonic() - self.t0:6.1f} s  {message}"
        self.events.append(line)
        say(message)


def api_get(port: int, path: str, token: str, timeout: float = 10) -> dict:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls_context())
    try:
        conn.request("GET", path, headers={"Authorization": f"Token {token}"})
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise OSError(f"{path}: {response.status}")
        return json.loads(payload)
    finally:
        conn.close()


def sample_lag(run: Run, port: int, token: str, stop: threading.Event, every_s: float = 2.0) -> None:
    while not stop.wait(every_s):
        try:
            stages = api_get(port, "/api/v1/pipeline", token)["stages"]
        except (OSError, ValueError, http.client.HTTPException):
            run.lag_failed += 1
            continue
        run.lag.append((time.monotonic() - run.t0, max((s["lag_seconds"] or 0.0) for s in stages) if stages else 0.0))


def wait_http(url: str, timeout: float, headers: dict | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            request = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(request, timeout=3, context=tls_context()) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not answer within {timeout:g} s")
        time.sleep(0.3)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def leftovers(mark: str, tmp: Path) -> list[int]:
    """Processes this run started that still live: by the mark in their environment or the
    folder in their command line (PostgreSQL and nginx rewrite their environment's memory)."""
    found = set()
    kids = children_map()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if f"{RUN_MARK}={mark}".encode() in environ or str(tmp).encode() in cmdline:
            found.update(tree(int(entry), kids))
    return sorted(found - {os.getpid()})


def main() -> int:  # noqa: C901, PLR0912, PLR0915 - one run, step by step
    plan = Plan(SECONDS)
    run = Run(plan)
    mark = secrets.token_hex(8)
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    tmp.chmod(0o755)  # PostgreSQL runs as its own user under it
    (tmp / "var").mkdir()
    (tmp / "media").mkdir()
    nginx_bin = shutil.which("nginx") or "/usr/sbin/nginx"
    for needed in (nginx_bin, shutil.which("openssl"), shutil.which("redis-server")):
        if not needed or not Path(needed).exists():
            raise SystemExit("nginx, openssl and redis-server are needed: apt-get install nginx openssl redis-server")
    base_env = {**os.environ, RUN_MARK: mark}
    pg = Postgres(tmp, base_env)
    redis_port = free_port()
    env = portal_env(tmp, pg_port=pg.port, redis_port=redis_port, mark=mark)
    services: list[Service] = []
    others: dict[str, subprocess.Popen] = {}
    stop_sampling = threading.Event()
    interrupted = []

    def on_signal(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    result = 1
    try:
        say(f"{AGENTS} agents x {GPUS} GPUs for {SECONDS:g} s under {tmp}; {machine_load()}")
        pg.start()
        redis_cmd = ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                     "no", "--dir", str(tmp), "--logfile", str(tmp / "redis.log")]  # fmt: skip

        def redis_start():
            others["redis"] = subprocess.Popen(redis_cmd, env=base_env, preexec_fn=die_with_parent)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    socket.create_connection(("127.0.0.1", redis_port), timeout=0.5).close()
                    return
                time.sleep(0.1)

        redis_start()
        say("migrating")
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)

        # Enrolment and settings through the portal's services, in this process.
        os.environ.update(env)
        os.environ["DATABASE_CONN_MAX_AGE"] = "0"
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.db import connection

        from portal.accounts.services import api_token_issue
        from portal.fleet.models import Host
        from portal.maintenance.rules import AGENT_SILENT
        from portal.maintenance.services.config import rule_config_set
        from portal.telemetry.services import host_token_issue

        hostnames = [f"soak-{n:04d}" for n in range(AGENTS)]
        tokens = {h: host_token_issue(hostname=h, label="soak", create_host=True).token for h in hostnames}
        user = get_user_model().objects.create_user(username="soak", password=secrets.token_urlsafe(16))
        api_token, _ = api_token_issue(user=user, label="soak pipeline sampler")
        rule_config_set(rule="overheat", params={"open_for_s": plan.overheat_open_for_s})
        rule_config_set(rule=AGENT_SILENT.key, params={"silent_after_s": plan.silent_after_s},
                        host=Host.objects.get(hostname=hostnames[0]))  # fmt: skip
        connection.close()
        # Hot GPUs: one on the agent that is cut off (its ticket comes from the catch-up), the
        # others spread over the fleet.
        hot: dict[int, set[int]] = {0: {1}}
        for n in range(1, HOT_GPUS):
            hot.setdefault(n * AGENTS // HOT_GPUS, set()).add(n % GPUS)
        expected_overheat = sum(len(v) for v in hot.values())

        # nginx in front of the web nodes.
        web_ports = [free_port() for _ in range(WEB_NODES)]
        cert, key = tmp / "cert.pem", tmp / "key.pem"
        openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        subprocess.run([*openssl, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        (tmp / "static").mkdir()
        https_port, http_port = free_port(), free_port()
        site = tmp / "gpu-fleet.conf"
        site.write_text(nginx_site(upstreams=web_ports, https_port=https_port, http_port=http_port, cert=cert,
                                   key=key, static=tmp / "static"))  # fmt: skip
        conf = tmp / "nginx.conf"
        conf.write_text(nginx_main(tmp, site))
        checked = subprocess.run([nginx_bin, "-t", "-c", str(conf), "-p", str(tmp)], capture_output=True, text=True)
        if checked.returncode:
            raise SystemExit(f"nginx refuses the site:\n{checked.stderr}")
        others["nginx"] = subprocess.Popen([nginx_bin, "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"],
                                           env=base_env, preexec_fn=die_with_parent)  # fmt: skip

        for number, port in enumerate(web_ports, 1):
            node_env = {**env, "WEB_PORT": str(port)}
            command, restart_sec = unit_command("gpu-fleet-web.service", node_env)
            command += ["--workers", str(WEB_PROCESSES)]
            services.append(Service(f"web-{number}", command, node_env, tmp / f"web-{number}.log", restart_sec))
        for number in range(1, WORKER_NODES + 1):
            command, restart_sec = unit_command("gpu-fleet-worker@.service", env, str(number))
            services.append(Service(f"worker-{number}", command, env, tmp / f"worker-{number}.log", restart_sec))
        command, restart_sec = unit_command("gpu-fleet-beat.service", env)
        services.append(Service("beat", command, env, tmp / "beat.log", restart_sec))
        for service in services:
            service.start()
        proxied = {"X-Forwarded-Proto": "https"}
        for port in web_ports:
            wait_http(f"http://127.0.0.1:{port}/healthz", 120, proxied)
        wait_http(f"https://127.0.0.1:{https_port}/healthz", 30)
        say(f"cluster up: nginx https://127.0.0.1:{https_port}/ in front of {WEB_NODES} web nodes, "
            f"{WORKER_NODES} worker nodes, beat")  # fmt: skip
        time.sleep(3)  # workers and beat connected
        by_name = {s.name: s for s in services}

        run.t0, run.t0_wall = time.monotonic(), time.time()
        agents = [Agent(n, h, tokens[h], https_port, run, hot.get(n, set())) for n, h in enumerate(hostnames)]
        for agent in agents:
            agent.start()
        sampler = threading.Thread(target=sample_lag, args=(run, https_port, api_token, stop_sampling), daemon=True)
        sampler.start()

        web, worker = by_name["web-1"], by_name["worker-1"]
        # An outage lasts until the service is back, plus nginx's fail_timeout (a node that failed
        # max_fails requests stays out that long, even once it answers again), plus 10 s.
        grace = 10.0 + max(float(n) for n in re.findall(r"fail_timeout=(\d+)s", site.read_text()))
        done: set[str] = set()
        busy_since: float | None = None
        rss_taken = False
        while True:
            now = time.monotonic()
            t = now - run.t0
            if not rss_taken and t >= min(10.0, 0.08 * SECONDS):
                kids = children_map()
                for service in services:
                    service.rss_start_kb = rss_kb(tree(service.process.pid, kids))
                pg_rss_start = rss_kb(pg.pids())
                other_rss_start = {name: rss_kb(tree(p.pid, kids)) for name, p in others.items()}
                rss_taken = True
            if "cut" not in done and t >= plan.cut[0]:
                done.add("cut")
                run.outages.append(("agent cut off", plan.cut[0], plan.cut[1]))
                run.note(f"{hostnames[0]} cut off for {plan.cut[1] - plan.cut[0]:g} s")
            if "web" not in done and t >= plan.web_kill[0]:
                done.add("web")
                web.kill()
                web.held_until = run.t0 + plan.web_kill[1]
                run.outages.append(("web-1 killed", t, plan.web_kill[1] + grace))
                run.note(f"web-1 SIGKILLed (serve and its Daphnes); back at {plan.web_kill[1]:.0f} s")
            if "worker" not in done and t >= plan.worker_kill_at:
                # Killed while it has work: one of its pool processes used CPU in the last 0.3 s
                # (or, after 15 s without that, anyway).
                pool = [pid for pid in worker.pids() if pid != worker.process.pid]
                before = cpu_ticks(pool)
                time.sleep(0.3)
                busy = cpu_ticks(pool) > before
                busy_since = busy_since or now
                if busy or now - busy_since > 15:
                    done.add("worker")
                    worker.kill()
                    run.outages.append(("worker-1 killed", t, t + worker.restart_sec + grace))
                    run.note(f"worker-1 SIGKILLed {'while busy' if busy else 'NOT seen busy'}; "
                             f"restarts after RestartSec={worker.restart_sec:g}")  # fmt: skip
                    run.events.append("worker busy when killed" if busy else "worker idle when killed")
            if "redis" not in done and t >= plan.redis_restart[0]:
                done.add("redis")
                others["redis"].terminate()
                others["redis"].wait(10)
                run.note(f"Redis stopped (its queue lost); starts again at {plan.redis_restart[1]:.0f} s")
                run.outages.append(("Redis restarted", t, plan.redis_restart[1] + grace))
            if "redis" in done and "redis-up" not in done and t >= plan.redis_restart[1]:
                done.add("redis-up")
                redis_start()
                run.note("Redis started again")
            if "pg" not in done and t >= plan.postgres_restart_at:
                done.add("pg")
                pg.restart()
                back = time.monotonic() - run.t0
                run.outages.append(("PostgreSQL restarted", t, back + grace))
                run.note(f"PostgreSQL restarted (pg_ctl restart -m fast) in {back - t:.1f} s")
            for service in services:
                service.supervise(now)
            if not run.stop_generating.is_set() and t >= SECONDS:
                run.stop_generating.set()
                run.note("agents stop collecting; sending what they hold")
            if run.stop_generating.is_set() and not any(agent.is_alive() for agent in agents):
                break
            if t > SECONDS + DRAIN_TIMEOUT_S:
                run.note("agents still hold batches after the drain timeout")
                break
            time.sleep(0.25)
        last_post = time.monotonic() - run.t0
        run.note("every agent's queue is empty; waiting for the pipeline to drain")
        drained_at = None
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline:
            for service in services:
                service.supervise(time.monotonic())
            try:
                stages = api_get(https_port, "/api/v1/pipeline", api_token)["stages"]
                if all(stage["backlog_batches"] == 0 for stage in stages):
                    drained_at = time.monotonic() - run.t0
                    break
            except (OSError, ValueError, http.client.HTTPException):
                pass
            time.sleep(1)
        stop_sampling.set()
        run.note("pipeline drained" if drained_at else "the pipeline did NOT drain")

        for service in services:
            if service.unexpected_exits:
                run.events.append(f"        {service.name} exited by itself {service.unexpected_exits} time(s); "
                                  "started again after its RestartSec, as systemd does")  # fmt: skip
        kids = children_map()
        rss = [(s.name, s.rss_start_kb, rss_kb(tree(s.process.pid, kids)) if s.running else 0, s.restarts)
               for s in services]  # fmt: skip
        rss.append(("postgres", pg_rss_start, rss_kb(pg.pids()), 1))
        rss += [(n, other_rss_start[n], rss_kb(tree(p.pid, kids)), int(n == "redis")) for n, p in others.items()]

        # What the database holds.
        from portal.maintenance.models import Ticket
        from portal.telemetry.models import Reading

        connection.close()
        generated = {pair for agent in agents for pair in agent.generated}
        generated_count = sum(len(agent.generated) for agent in agents)
        stored_count = Reading.objects.count()
        distinct = Reading.objects.values("gpu_id", "ts").distinct().count()
        pairs = Reading.objects.values_list("gpu__uuid", "ts").iterator(chunk_size=20_000)
        stored = {(u, round(ts.timestamp() * 1000)) for u, ts in pairs}
        tickets: dict[str, int] = {}
        # A host's ticket holds its GPUs' tickets (agent silent on every GPU): the host's counts.
        for rule in Ticket.objects.filter(parent__isnull=True).values_list("rule", flat=True):
            tickets[rule] = tickets.get(rule, 0) + 1
        connection.close()

        report = build_report(run, plan, agents, generated, generated_count, stored, stored_count, distinct, tickets,
                              expected_overheat, rss, last_post, drained_at)  # fmt: skip
        print_report(report)
        if os.environ.get("SOAK_REPORT"):
            Path(os.environ["SOAK_REPORT"]).write_text(json.dumps(report, indent=1))
        result = 0 if all(report["checks"].values()) else 1
    except KeyboardInterrupt:
        say("interrupted: stopping everything")
        result = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_sampling.set()
        run.stop_generating.set()
        for service in reversed(services):
            service.held_until = float("inf")
            service.stop()
        for name in ("nginx", "redis"):
            process = others.get(name)
            if process and process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)
        pg.stop()
        left = leftovers(mark, tmp)
        if left:
            say(f"leftover processes {left}: killed")
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            result = result or 1
        if os.environ.get("SOAK_KEEP"):
            say(f"logs and data kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


def build_report(run, plan, agents, generated, generated_count, stored, stored_count, distinct, tickets,
                 expected_overheat, rss, last_post, drained_at) -> dict:  # fmt: skip
    outside: dict[str, int] = {}
    inside: dict[str, int] = {}
    for t, status in run.answers.items:
        in_outage = any(start <= t <= end for what, start, end in run.outages if what != "agent cut off")
        bucket = inside if in_outage else outside
        bucket[str(status)] = bucket.get(str(status), 0) + 1
    server_errors_outside = sum(n for s, n in outside.items() if not s.isdigit() or s.startswith("5"))
    errors_outside_at = [
        round(t, 1)
        for t, status in run.answers.items
        if (not isinstance(status, int) or status >= 500)
        and not any(start <= t <= end for what, start, end in run.outages if what != "agent cut off")
    ]
    refused = sum(len(agent.refused) for agent in agents)
    expected_tickets = {"overheat": expected_overheat, "agent_silent": 1}
    raised = {rule: tickets.get(rule, 0) for rule in expected_tickets}
    raised["other rules"] = sum(n for rule, n in tickets.items() if rule not in expected_tickets)
    expected_tickets["other rules"] = 0
    lags = [lag for _, lag in run.lag]
    grown = [name for name, start, end, restarts in rss if not restarts and start and end > start * RSS_GROWTH_LIMIT[0]
             and end - start > RSS_GROWTH_LIMIT[1]]  # fmt: skip
    checks = {
        "no reading missing": not (generated - stored),
        "no duplicate (gpu, ts)": distinct == stored_count,
        "nothing stored that was not generated": not (stored - generated),
        "no batch refused": refused == 0,
        "tickets as expected": raised == expected_tickets,
        "no 5xx or dropped connection outside outages": server_errors_outside == 0,
        "pipeline drained": drained_at is not None,
        "no memory growth": not grown,
    }
    return {
        "agents": len(agents), "gpus_per_host": GPUS, "seconds": plan.seconds, "interval_s": INTERVAL_S,
        "reading_s": READING_S, "web_nodes": WEB_NODES, "worker_nodes": WORKER_NODES,
        "generated": generated_count, "generated_distinct": len(generated), "stored": stored_count,
        "stored_distinct": distinct, "missing": len(generated - stored), "unexpected": len(stored - generated),
        "refused_batches": refused, "posts": len(run.answers.items),
        "tickets_expected": expected_tickets, "tickets_raised": raised, "tickets_by_rule": tickets,
        "answers_outside_outages": outside, "answers_in_outages": inside, "errors_outside_at": errors_outside_at[:50],
        "lag_p50_s": percentile(lags, 0.5), "lag_p99_s": percentile(lags, 0.99), "lag_max_s": max(lags, default=0.0),
        "lag_samples": len(lags), "lag_samples_failed": run.lag_failed,
        "last_post_s": last_post, "drained_s": drained_at,
        "rss_kb": [{"process": n, "start": s, "end": e, "restarted": bool(r)} for n, s, e, r in rss],
        "rss_grown": grown, "outages": run.outages, "events": run.events, "checks": checks,
        "load": machine_load(),
    }  # fmt: skip


def print_report(r: dict) -> None:
    mark = {True: "ok", False: "FAIL"}
    print(f"\nsoak: {r['agents']} agents x {r['gpus_per_host']} GPUs, a reading every {r['reading_s']:g} s, a batch "
          f"every {r['interval_s']:g} s, {r['seconds']:g} s; nginx + {r['web_nodes']} web + {r['worker_nodes']} "
          f"worker nodes + beat; {r['load']}")  # fmt: skip
    print("\nfaults (seconds into the run):")
    for line in r["events"]:
        print(f"  {line}")
    print(f"\n  {'':44} {'expected':>10} {'got':>10}")
    print(f"  {'readings generated / stored':44} {r['generated']:>10,} {r['stored']:>10,}")
    print(f"  {'  missing / duplicate / not generated':44} {'0 / 0 / 0':>10} "
          f"{r['missing']} / {r['stored'] - r['stored_distinct']} / {r['unexpected']}")  # fmt: skip
    print(f"  {'batches posted (answers) / refused':44} {'':>10} {r['posts']:>10,} / {r['refused_batches']}")
    for rule, expected in r["tickets_expected"].items():
        print(f"  {'tickets ' + rule:44} {expected:>10} {r['tickets_raised'][rule]:>10}")
    print(f"  answers outside outages: {r['answers_outside_outages']}")
    print(f"  answers in outage windows: {r['answers_in_outages']}")
    if r["errors_outside_at"]:
        print(f"  5xx / dropped outside outages at (s): {r['errors_outside_at']}")
    windows = ", ".join(f"{what} {start:.0f}-{end:.0f} s" for what, start, end in r["outages"])
    print(f"  outage windows: {windows}")
    print(f"  pipeline lag (largest stage, every 2 s): p50 {r['lag_p50_s']:.1f} s, p99 {r['lag_p99_s']:.1f} s, "
          f"max {r['lag_max_s']:.1f} s ({r['lag_samples']} samples, {r['lag_samples_failed']} unanswered)")  # fmt: skip
    drained = f"{r['drained_s'] - r['last_post_s']:.1f} s after" if r["drained_s"] else "NOT drained"
    print(f"  last post at {r['last_post_s']:.0f} s; pipeline drained {drained}")
    print("\n  memory (RSS of the process and its children, MiB)   start      end")
    for row in r["rss_kb"]:
        flag = " (restarted: a new process)" if row["restarted"] else ""
        flag = " GREW" if row["process"] in r["rss_grown"] else flag
        print(f"  {row['process']:50} {row['start'] / 1024:7.0f}  {row['end'] / 1024:7.0f}{flag}")
    print("\nchecks:")
    for name, ok in r["checks"].items():
        print(f"  {mark[ok]:4} {name}")


if __name__ == "__main__":
    sys.exit(main())
