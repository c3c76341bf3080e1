"""Live push under load: 500 simulated GPUs at 1 reading/s, 20 WebSocket clients, production layer.

    .venv/bin/python bench/live.py [--seconds 30] [--gpus 500] [--clients 20]

Starts the portal under daphne in a subprocess with the production settings (DEBUG=false,
channels-redis on REDIS_URL, default redis://127.0.0.1:6379/15, flushed first) on a fresh
PostgreSQL database (bench_live; `--database sqlite` for a throwaway SQLite file), registers
hosts of 8 GPUs with a host token each, and logs in a viewer. Every host posts one batch a
second through the ingest API (hosts spread over the second, as real agents are); each
reading's ts is the wall-clock moment of the POST. The WebSocket clients (10 on GPU pages, 5 on
host pages, 5 on the fleet page) note when each point arrives, so latency = arrival - ts:
ingest, commit, hook, coalescing, Redis, consumer, socket. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.device import METRIC_FIELDS as METRICS  # noqa: E402  (the protocol's reading fields)
from bench.harness import portal_served  # noqa: E402

GPUS_PER_HOST = 8
TARGET_P95_MS = 250.0

SETUP = """
import json
from django.contrib.auth import get_user_model
from portal.accounts.services import user_set_role
from portal.fleet import services
from portal.telemetry.services import host_token_issue
user, _ = get_user_model().objects.get_or_create(username="bench")
user.set_password("bench-password-123")
user.save()
user_set_role(user=user, role="viewer")
hosts = []
for h in range({hosts}):
    issued = host_token_issue(hostname=f"bench-{{h:03d}}", label="bench", create_host=True)
    gpus = []
    for i in range({per_host}):
        if h * {per_host} + i >= {gpus}:
            break
        uuid = f"GPU-bench{{h:03d}}{{i:02d}}-0000-4000-8000-000000000000"
        gpu = services.gpu_create(uuid=uuid, host=issued.record.host, index=i, model_name="NVIDIA H100",
                                  temp_slowdown_c=87, temp_shutdown_c=92)
        gpus.append([gpu.pk, uuid])
    hosts.append({{"hostname": issued.record.host.hostname, "token": issued.token, "gpus": gpus}})
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print("BENCH" + json.dumps({{"hosts": hosts, "session": session.session_key}}))
"""


def iso(moment: float) -> str:
    return dt.datetime.fromtimestamp(moment, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


COALESCE_MS = 500  # portal/settings.py: LIVE_COALESCE_S
FLEET_COALESCE_MS = 200  # LIVE_FLEET_COALESCE_S


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- a minimal HTTP/1.1 and WebSocket client on asyncio streams (loopback, no TLS) ----------------


async def http_request(reader, writer, method: str, path: str, host: str, body: bytes, headers: dict) -> int:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length:
        await reader.readexactly(length)
    return status


async def ws_connect(port: int, path: str, cookie: str):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://127.0.0.1:{port}\r\n"
        f"Cookie: {cookie}\r\n\r\n"
    )
    writer.write(request.encode())
    await writer.drain()
    status = await reader.readline()
    if b" 101 " not in status:
        raise RuntimeError(f"WebSocket handshake failed: {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    return reader, writer


async def ws_frames(reader):
    """Yield (opcode, payload) of the server's (unmasked) frames, joining continuations."""
    buffer = b""
    while True:
        head = await reader.readexactly(2)
        fin, opcode, length = head[0] & 0x80, head[0] & 0x0F, head[1] & 0x7F
        if length == 126:
            length = struct.unpack("!H", await reader.readexactly(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", await reader.readexactly(8))[0]
        payload = await reader.readexactly(length)
        if opcode == 8:
            return
        if opcode in (9, 10):
            continue
        buffer += payload
        if fin:
            yield buffer
            buffer = b""


# --- the load ---------------------------------------------------------------------------------------


class Stats:
    def __init__(self):
        self.latency: dict[str, list[float]] = {"gpu": [], "host": [], "fleet": []}
        self.messages = 0
        self.kind_messages: dict[str, int] = {"gpu": 0, "host": 0, "fleet": 0}
        self.kind_clients: dict[str, int] = {"gpu": 0, "host": 0, "fleet": 0}
        self.points = 0
        self.ingest_ms: list[float] = []
        self.ingest_errors = 0
        self.measuring = False


async def agent(port: int, host: dict, offset: float, stop_at: float, stats: Stats) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(offset)
    next_at = time.monotonic()
    while time.monotonic() < stop_at:
        now = time.time()
        readings = []
        for _, uuid in host["gpus"]:
            reading = dict.fromkeys(METRICS)
            reading.update(
                gpu_uuid=uuid, ts=iso(now), temperature_c=random.randint(55, 85),
                power_w=round(random.uniform(300, 690), 1), power_limit_w=700.0,
                utilization_gpu_pct=random.randint(80, 100),
                fan_speed_pct=random.randint(40, 70),
                sm_clock_mhz=1980, mem_clock_mhz=2619, memory_used_mib=60000, throttle_reasons=[],
            )  # fmt: skip
            readings.append(reading)
        body = json.dumps(
            {
                "batch_id": str(uuidlib.uuid4()),
                "sent_at": iso(now),
                "host": {"hostname": host["hostname"], "agent_version": "bench"},
                "gpus": [],
                "readings": readings,
            }
        ).encode()
        started = time.monotonic()
        status = await http_request(
            reader, writer, "POST", "/api/v1/ingest", f"127.0.0.1:{port}", body,
            {"Authorization": f"Bearer {host['token']}", "Content-Type": "application/json"},
        )  # fmt: skip
        if stats.measuring:
            stats.ingest_ms.append((time.monotonic() - started) * 1000)
            if status != 202:
                stats.ingest_errors += 1
        next_at += 1.0
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    writer.close()


async def client(port: int, path: str, kind: str, cookie: str, stats: Stats, ready: asyncio.Event) -> None:
    reader, writer = await ws_connect(port, path, cookie)
    frames = ws_frames(reader)
    hello = json.loads(await frames.__anext__())
    assert hello["kind"] == "hello", hello
    ready.set()
    try:
        async for payload in frames:
            arrived = time.time() * 1000
            message = json.loads(payload)
            if message.get("kind") != "points" or not stats.measuring:
                continue
            stats.messages += 1
            stats.kind_messages[kind] += 1
            stats.points += len(message["points"])
            stats.latency[kind].extend(arrived - point[1] for point in message["points"])
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def run_load(port: int, hosts: list[dict], cookie: str, seconds: float, clients: int) -> Stats:
    stats = Stats()
    rng = random.Random(7)
    all_gpus = [gpu_uuid for host in hosts for _, gpu_uuid in host["gpus"]]
    plan = []
    for n in range(clients):
        if n % 4 in (0, 1):
            plan.append(("gpu", f"/ws/live/gpu/{rng.choice(all_gpus)}/"))
        elif n % 4 == 2:
            plan.append(("host", f"/ws/live/host/{rng.choice(hosts)['hostname']}/"))
        else:
            plan.append(("fleet", "/ws/live/fleet/"))
    for kind, _ in plan:
        stats.kind_clients[kind] += 1
    events = [asyncio.Event() for _ in plan]
    listeners = [
        asyncio.create_task(client(port, path, kind, cookie, stats, events[i])) for i, (kind, path) in enumerate(plan)
    ]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in events)), 20)
    warmup = 3.0
    stop_at = time.monotonic() + warmup + seconds
    agents = [asyncio.create_task(agent(port, host, i / len(hosts), stop_at, stats)) for i, host in enumerate(hosts)]
    await asyncio.sleep(warmup)
    stats.measuring = True
    started = time.monotonic()
    await asyncio.gather(*agents)
    await asyncio.sleep(1.0)  # the last coalesced messages
    stats.measuring = False
    stats.elapsed = time.monotonic() - started
    for task in listeners:
        task.cancel()
    await asyncio.gather(*listeners, return_exceptions=True)
    return stats


def scratch_postgres() -> str:
    """A fresh, empty database bench_live on the local PostgreSQL; its URL."""
    import psycopg

    admin_url = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_live WITH (FORCE)")
        conn.execute("CREATE DATABASE bench_live")
    return admin_url.rsplit("/", 1)[0] + "/bench_live"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--gpus", type=int, default=500)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--redis", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="Daphne processes (manage.py serve)")
    parser.add_argument(
        "--database", choices=("postgres", "sqlite"), default="postgres",
        help="PostgreSQL (scratch database bench_live on BENCH_PG_URL's server, as in production) or SQLite",
    )  # fmt: skip
    args = parser.parse_args()

    import redis

    redis.Redis.from_url(args.redis, socket_connect_timeout=2).flushdb()
    var_dir = Path(tempfile.mkdtemp(prefix="bench-live-"))
    database_url = f"sqlite:///{var_dir}/bench.sqlite3" if args.database == "sqlite" else scratch_postgres()
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}}
    env.update(
        VAR_DIR=str(var_dir), DATABASE_URL=database_url, DATABASE_CONN_MAX_AGE="600", REDIS_URL=args.redis,
        DEBUG="false", SECRET_KEY="bench-" + uuidlib.uuid4().hex, ALLOWED_HOSTS="127.0.0.1,localhost",
        PLAIN_HTTP="true", LOG_LEVEL="WARNING", DJANGO_SETTINGS_MODULE="bench.settings", PYTHONUNBUFFERED="1",
    )  # fmt: skip
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, check=True)
    host_count = -(-args.gpus // GPUS_PER_HOST)
    setup = SETUP.format(hosts=host_count, per_host=GPUS_PER_HOST, gpus=args.gpus)
    out = subprocess.run([*manage, "shell", "-c", setup], cwd=REPO, env=env, check=True, capture_output=True, text=True)
    prepared = json.loads(out.stdout.split("BENCH", 1)[1])
    hosts = prepared["hosts"]

    log_path = var_dir / "daphne.log"
    with portal_served(env, log=log_path, workers=args.workers, timeout_s=30) as port:
        cookie = f"sessionid={prepared['session']}"
        stats = asyncio.run(run_load(port, hosts, cookie, args.seconds, args.clients))
    log_text = log_path.read_text()
    errors = [line for line in log_text.splitlines() if "Traceback" in line or " ERROR " in line]
    if errors:
        (REPO / "var").mkdir(exist_ok=True)
        (REPO / "var" / "bench-live-daphne.log").write_text(log_text[-200_000:])
    shutil.rmtree(var_dir, ignore_errors=True)

    print(f"live bench: {args.gpus} GPUs on {len(hosts)} hosts at 1 reading/s, {args.clients} WebSocket clients, "
          f"{args.seconds:.0f} s measured, channels-redis at {args.redis}, {args.database}, "
          f"{args.workers} server process(es)")  # fmt: skip
    http_p50, http_p95 = percentile(stats.ingest_ms, 50), percentile(stats.ingest_ms, 95)
    print(f"  ingest: {len(stats.ingest_ms)} batches, {stats.ingest_errors} not 202, "
          f"HTTP p50 {http_p50:.1f} ms, p95 {http_p95:.1f} ms")  # fmt: skip
    print(f"  delivered: {stats.messages / stats.elapsed:.1f} messages/s, {stats.points / stats.elapsed:.0f} points/s "
          f"to all clients")  # fmt: skip
    everything = [value for values in stats.latency.values() for value in values]
    for kind, values in [*stats.latency.items(), ("all", everything)]:
        print(f"  ingest-to-client latency [{kind:5}] n={len(values):6d}  p50 {percentile(values, 50):6.1f} ms  "
              f"p95 {percentile(values, 95):6.1f} ms  p99 {percentile(values, 99):6.1f} ms")  # fmt: skip
    if errors:
        print(f"  server log: {len(errors)} error lines (tail in var/bench-live-daphne.log)")
    rates = ", ".join(
        f"{kind} {stats.kind_messages[kind] / stats.elapsed / max(1, stats.kind_clients[kind]):.1f}"
        for kind in ("gpu", "host", "fleet")
    )
    print(f"  messages/s per page: {rates}  (windows: GPU/host {COALESCE_MS} ms, fleet {FLEET_COALESCE_MS} ms, "
          f"per server process)")  # fmt: skip
    p95 = percentile(everything, 95)
    print(f"  target p95 < {TARGET_P95_MS:.0f} ms, all messages: {'met' if p95 < TARGET_P95_MS else 'MISSED'}"
          f" ({p95:.0f} ms)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
