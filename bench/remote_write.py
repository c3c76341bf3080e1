"""Remote write benchmark: samples per second stored end to end through Prometheus remote write,
beside the agents' path in the same run, with the portal's web server, worker and beat running
(`manage.py run`: SQLite, the broker in files, as a small lab runs it).

Run with `make bench-remote-write` or `python bench/remote_write.py`; BENCH_SECONDS (default 60)
is each phase's posting time (600 for the 10-minute run of the issue), BENCH_CLIENTS (default 4)
the clients posting as fast as answered; BENCH_AGENT=0 runs the remote write phase alone,
BENCH_AGENT_SECONDS sets the agent phase's own length (the 10-minute memory run: a minute of the
agents, then ten of remote write, whose requests are made as they are posted).

- agent phase: 100-reading gzip batches (10 GPUs × 10 readings) of 20 hosts; readings/s from the
  first post until the last reading is stored; × 15 (a reading's values, the dcgm-exporter
  series the mapping reads) gives values/s.
- remote write phase: snappy WriteRequests of 20 other hosts, each 10 GPUs × 10 timestamps × 15
  series (1,500 samples, what Prometheus sends in a few shards' batches); samples/s from the first
  post until every one is in a stored reading (handed on by the write's task and beat's pass).
  Target: ≥ 80 % of the agents' values/s.
- CPU per sample (or per value) of every process (web, worker, beat) in each phase, and the
  resident memory of the web server sampled every second through the remote write phase (the
  first, the last and the largest): it should stay flat.
"""

from __future__ import annotations

import datetime as dt
import http.client
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import CpuMeter, host_bodies, ingest_post, machine_load, portal_served  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "60"))
AGENT = os.environ.get("BENCH_AGENT", "1") != "0"  # 0: the remote write phase alone
AGENT_SECONDS = float(os.environ.get("BENCH_AGENT_SECONDS", SECONDS))  # the agent phase's own length
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))
AGENT_POSTS_PER_S = 300  # batches prepared per second of the agents' phase
HOSTS, GPUS, STEPS = 20, 10, 10
SERIES = {
    "DCGM_FI_DEV_GPU_TEMP": 60, "DCGM_FI_DEV_POWER_USAGE": 300.5, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1e9,
    "DCGM_FI_DEV_GPU_UTIL": 95, "DCGM_FI_DEV_MEM_COPY_UTIL": 40, "DCGM_FI_DEV_FB_USED": 40000,
    "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_FAN_SPEED": 50,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 4, "DCGM_FI_DEV_XID_ERRORS": 0,
}  # fmt: skip
VALUES_PER_READING = len(SERIES)


def _host_series(hostname: str) -> list[tuple[bytes, float]]:
    """A host's series: (its label entries as sent, its value), in the order of remote_bodies."""
    from portal.remote_write.wire import labels_encode

    out = []
    for gpu in range(GPUS):
        base = {"UUID": f"GPU-{hostname}-{gpu:04d}", "gpu": str(gpu), "Hostname": hostname,
                "modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"00000000:{gpu + 16:02X}:00.0",
                "DCGM_FI_DRIVER_VERSION": "580.65.06", "instance": "exporter:9400", "job": "dcgm"}  # fmt: skip
        out.extend((labels_encode({**base, "__name__": name}), float(value)) for name, value in SERIES.items())
    return out


_series_of: dict[str, list[tuple[bytes, float]]] = {}


def remote_bodies(hostname: str, start_ms: int, count: int, first: int = 0) -> list[bytes]:
    """count WriteRequests of one host from its first-th on, each 10 timestamps (1 s apart) of
    its GPUs' 15 series (write_request_encode's bytes, the labels encoded once per host and a
    request's samples once per value: the clients make them as they post, on the machine the
    portal runs on)."""
    from portal.remote_write.wire import sample_encode, series_encode, snappy_compress

    series = _series_of.get(hostname) or _series_of.setdefault(hostname, _host_series(hostname))
    bodies = []
    for number in range(first, first + count):
        stamps = [start_ms + 1000 * (number * STEPS + step) for step in range(STEPS)]
        values = map(float, SERIES.values())
        samples = {value: b"".join(sample_encode(stamp, value) for stamp in stamps) for value in values}
        body = b"".join(series_encode(entries, samples[value]) for entries, value in series)
        bodies.append(snappy_compress(body))
    return bodies


class Client(threading.Thread):
    def __init__(self, port: int, work: list[tuple[str, bytes]], path: str, until: float):
        super().__init__(daemon=True)
        self.port, self.work, self.path, self.until = port, work, path, until
        self.posted = 0
        self.errors: dict[int | str, int] = {}

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        for token, body in self.work:
            if time.monotonic() >= self.until:
                break
            if self.path == "agent":
                status, _ = ingest_post(conn, token, body)
                ok = status == 202
            else:
                headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "snappy",
                           "Content-Type": "application/x-protobuf"}  # fmt: skip
                try:
                    conn.request("POST", "/api/v1/prometheus/write", body=body, headers=headers)
                    response = conn.getresponse()
                    response.read()
                    status = response.status
                except (OSError, http.client.HTTPException) as error:
                    conn.close()
                    status = type(error).__name__
                ok = status == 204
            if ok:
                self.posted += 1
            else:
                self.errors[status] = self.errors.get(status, 0) + 1


def remote_work_of(token: str, hostnames: list[str], start_ms: int):
    """A client's requests, made as they are posted (a 10-minute run would hold gigabytes made
    up front): its hosts in turn, each host's in time order."""
    for number in itertools.count():
        for hostname in hostnames:
            yield token, remote_bodies(hostname, start_ms, 1, first=number)[0]


def web_rss_mib() -> float:
    """The resident memory of the portal's web server (Daphne under `manage.py run`), MiB."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "daphne" not in cmdline and " serve" not in cmdline:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total = max(total, int(line.split()[1]) / 1024)
    return total


def readings_stored(prefix: str) -> int:
    """Readings stored for the hosts named prefix*: raw rows (the bench's readings are all recent)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM telemetry_reading r JOIN fleet_gpu g ON g.id = r.gpu_id "
            "JOIN fleet_host h ON h.id = g.host_id WHERE h.hostname LIKE %s", [prefix + "%"],
        )  # fmt: skip
        return cursor.fetchone()[0]


def phase(port: int, path: str, work, *, prefix: str, per_post: int, rss: list, seconds: float = SECONDS):
    meter = CpuMeter()
    meter.start()
    started = time.monotonic()
    clients = [Client(port, items, path, started + seconds) for items in work]
    for client in clients:
        client.start()
    stop_sampling = threading.Event()

    def sample():
        while not stop_sampling.wait(1.0):
            rss.append(web_rss_mib())

    sampler = threading.Thread(target=sample, daemon=True)
    if path == "remote write":
        sampler.start()
    for client in clients:
        client.join()
    posted = sum(client.posted for client in clients) * per_post
    errors = {k: v for client in clients for k, v in client.errors.items()}
    deadline = time.monotonic() + 120
    while (stored := readings_stored(prefix)) < posted and time.monotonic() < deadline:
        time.sleep(0.25)
    elapsed = time.monotonic() - started
    stop_sampling.set()
    meter.stop()
    return posted, stored, elapsed, meter, errors


def main() -> None:
    var_dir = Path(tempfile.mkdtemp(prefix="bench-remote-write-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{var_dir}/bench.sqlite3"
    os.environ["VAR_DIR"] = str(var_dir)
    from bench.harness import django_setup

    django_setup(DJANGO_SETTINGS_MODULE="bench.settings_fast_beat")
    from portal.remote_write.services.sources import ingest_source_issue
    from portal.telemetry.services import host_token_issue

    source_token = ingest_source_issue(name="bench", hosts="rw-*").token
    agent_hosts = [f"ag-{n:02d}" for n in range(HOSTS)]
    tokens = {h: host_token_issue(hostname=h, label="bench", create_host=True).token for h in agent_hosts}
    # More than the clients can post in the time (~200 batches a second on 2 cores: at 40, the agents'
    # phase of a 60 s run ran out of batches after 13 to 17 s), each 10 s of readings, all in the past.
    posts_per_host = int(AGENT_SECONDS * AGENT_POSTS_PER_S / HOSTS) + 5 if AGENT else 0
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2) - dt.timedelta(seconds=posts_per_host * STEPS)
    print(f"preparing {posts_per_host * HOSTS} agent requests…")
    agent_work: list[list] = [[] for _ in range(CLIENTS)]
    for number, hostname in enumerate(agent_hosts):
        bodies = host_bodies(hostname, posts_per_host, start, every=dt.timedelta(seconds=1), gpus=GPUS, per_gpu=STEPS)
        agent_work[number % CLIENTS].extend((tokens[hostname], body) for body in bodies)
    # Remote write's times start as far back as the agents' (10 s a request), and further back by
    # 60 s per second of posting (up to 6 requests a second per host): the newest times must stay
    # in the past, or their samples are skipped (outside the acceptance window) and never stored.
    back = dt.timedelta(hours=2) + dt.timedelta(seconds=SECONDS * 60)
    remote_start = int((dt.datetime.now(dt.UTC) - back).timestamp() * 1000)
    remote_hosts = [f"rw-{number:02d}" for number in range(HOSTS)]
    remote_work = [remote_work_of(source_token, remote_hosts[n::CLIENTS], remote_start) for n in range(CLIENTS)]
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(DEBUG="false", ALLOWED_HOSTS="127.0.0.1,localhost", PLAIN_HTTP="true", LOG_LEVEL="WARNING")
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "check", "-v", "0"], env=env, check=True)
    load_before = machine_load()
    rss: list[float] = []
    with portal_served(env, log=var_dir / "portal.log", timeout_s=900, whole=True) as port:
        time.sleep(2)
        per_batch = GPUS * STEPS
        agent = (
            phase(port, "agent", agent_work, prefix="ag-", per_post=per_batch, rss=[], seconds=AGENT_SECONDS)
            if AGENT
            else None
        )
        remote = phase(port, "remote write", remote_work, prefix="rw-", per_post=per_batch, rss=rss)
    report(agent, remote, rss, load_before)


def _per_item(meter, items: int) -> str:
    kinds = ("web", "worker", "beat")
    return ", ".join(f"{kind} {meter.seconds.get(kind, 0) / max(1, items) * 1e6:.1f}" for kind in kinds)


def report(agent, remote, rss, load_before) -> None:
    agent_values = 0.0
    if agent is not None:
        posted, stored, elapsed, meter, errors = agent
        agent_values = stored * VALUES_PER_READING / elapsed
        print(
            f"agent path: {stored:,} of {posted:,} readings stored in {elapsed:.1f} s: {stored / elapsed:,.0f} "
            f"readings/s = {agent_values:,.0f} values/s (×{VALUES_PER_READING}); errors {errors or 'none'}"
        )
        values = stored * VALUES_PER_READING
        agent_cpu = sum(meter.seconds.get(kind, 0) for kind in ("web", "worker", "beat"))
        print(f"  CPU {agent_cpu / max(1, values) * 1e6:.1f} µs per value ({_per_item(meter, values)}); {meter.line()}")
    posted, stored, elapsed, meter, errors = remote
    samples = stored * VALUES_PER_READING
    ratio = samples / elapsed / agent_values if agent_values else 0.0
    print(
        f"remote write: {samples:,} samples ({stored:,} readings of {posted:,}) stored in {elapsed:.1f} s: "
        f"{samples / elapsed:,.0f} samples/s, {ratio:.0%} of the agent path's values/s "
        f"(target ≥ 80 %: {'✔' if ratio >= 0.8 else '✘'}); errors {errors or 'none'}"
    )
    remote_cpu = sum(meter.seconds.get(kind, 0) for kind in ("web", "worker", "beat"))
    print(f"  CPU {remote_cpu / max(1, samples) * 1e6:.1f} µs per sample ({_per_item(meter, samples)}); {meter.line()}")
    if rss:
        print(
            f"  web server RSS over the phase: first {rss[0]:.0f} MiB, middle {rss[len(rss) // 2]:.0f} MiB, "
            f"last {rss[-1]:.0f} MiB, max {max(rss):.0f} MiB ({len(rss)} samples, one a second)"
        )
        step = 60 if len(rss) > 300 else 10
        print(f"  RSS every {step} s: " + " ".join(f"{value:.0f}" for value in rss[::step]) + " MiB")
    print(f"{load_before} before; {machine_load()} after")


if __name__ == "__main__":
    main()
