"""What the demo shows, and when: the simulated hosts, their scenarios and speeds, a day of
history so the 24 h charts and rollups are not empty, and the timeline printed at start.

Rules judge conditions over the readings' own (real) timestamps, while each simulated host's
scenario clock sets how fast its faults develop (agents/simulate.py). Training jobs run on real
time (minutes long), whatever the speed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

# (hostname, scenarios, speed): one simulated host per line, each GPU gets the next scenario.
# sim-desk-c at 60x: an XID 15 scenario minutes in (15 s), its silent GPU stops after 30 (30 s);
# sim-rack-a at 120x: a failing rack cooler over 6 simulated hours (3 minutes), throttling;
# sim-rack-b on --speed (720x): dust, fan wear and ECC drifting over simulated days.
SIMULATED_HOSTS = [
    ("sim-desk-c", "xid,silent,healthy,healthy", 60.0),
    ("sim-rack-a", "overheat,throttle,overclock,pcie", 120.0),
    ("sim-rack-b", "dust,fan-wear,ecc,healthy", None),
]
AGENT_INTERVAL_S = 2
# The demo's hosts count as silent after a minute without readings (the fleet default is 5).
DEMO_SILENT_AFTER_S = 60
HISTORY = dt.timedelta(hours=23, minutes=50)
HISTORY_STEP = dt.timedelta(minutes=3)
# The history's training jobs: hours long with pauses between them, as a lab's day looks.
HISTORY_JOB_S, HISTORY_PAUSE_S = (1.5 * 3600, 6 * 3600), (10 * 60, 90 * 60)

TIMELINE = """What happens next (times from now):
  at once    "due"/"overdue" maintenance tickets for dgx-02 and ws-lab-03 (old records); the
             24 h charts of the sim-* GPUs show a day of training jobs; the Wear panel of
             sim-rack-b GPU 0 shows 60 days of dust building up and a cleaning; thermal
             throttling on sim-rack-a GPU 1;
             sim-desk-c GPU 0's verified repair 3 days ago (GPU page: Diagnostics, Maintenance
             timeline, Status history; its RMA pack): XID 79 ticket, out for repair, a re-seat, a
             level-1 diagnostic that FAILED (another XID 79), a new riser under RMA-2026-0412, a
             diagnostic that PASSED, back in service through the return gate (not forced)
  ~20 s      "GPU fell off the bus (XID 79)" on sim-desk-c GPU 0 again, then an XID every 3 minutes:
             a new ticket that drains the local Slurm node when Slurm runs (host page: Slurm node),
             and the GPU a lemon (Reliability report: Lemons), like dgx-02 GPU 2
  1-3 min    "Agent silent" for sim-desk-c GPU 1, which stops answering after 30 s
  3-15 min   overheating on sim-rack-a GPU 0, then dust, fan wear, ECC and PCIe faults
  jobs       the sim-* GPUs run Slurm jobs of alice, bob and chen (Jobs; a GPU page: its jobs); the
             XID 79 on sim-desk-c GPU 0 kills the job there (its job page: interrupted, GPU-hours
             lost); bob's notebook job holds two ws-lab-03 GPUs idle; Usage report: a week of it,
             alice's 90 hours flat out on dgx-01
"""


SLURM_HOST = "sim-desk-c"  # its XID 79 at ~20 s drains the local cluster's node


def slurm_start(say):
    """With Slurm installed and root: a single-node cluster under VAR_DIR/slurm, its node given to
    SLURM_HOST, and the portal's processes (started after this) told to use it. Otherwise say
    how to see it. Returns the cluster, or None."""
    from portal.demo import slurm

    if settings.SLURM_ENABLED:
        say("Slurm: SLURM_MODE is set; the demo uses your cluster (its hosts need Slurm nodes).")
        return None
    missing = slurm.missing_commands()
    if missing or os.geteuid() != 0:
        why = f"missing {', '.join(missing)}" if missing else "it needs root to run slurmd"
        say(f"Slurm: off ({why}). To see the XID 79 ticket drain a Slurm node: {slurm.INSTALL_HINT}, "
            "then run the demo as root; or SLURM_MODE=cli or rest with your own cluster (docs/slurm.md).")  # fmt: skip
        return None
    root = Path(settings.VAR_DIR) / "slurm"
    slurm.stop_stale(root)
    shutil.rmtree(root, ignore_errors=True)  # a fresh cluster each time: no state left from the last demo
    try:
        cluster = slurm.start(root, rest=False)
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        say(f"Slurm: the local cluster did not start ({str(error).splitlines()[0]}); the demo goes on without it.")
        return None
    os.environ.update(SLURM_MODE="cli", SLURM_CONF=str(cluster.conf))
    settings.SLURM_ENABLED, settings.SLURM_MODE = True, "cli"
    say(
        f"Slurm: a single-node cluster under {root} (node {cluster.node}) is {SLURM_HOST}'s node; the XID 79 "
        f"at ~20 s drains it (host page {SLURM_HOST}: Slurm node); resume it there or with a repair_return run."
    )
    return cluster


def slurm_node_assign(cluster) -> None:
    from portal.fleet.models import Host

    Host.objects.filter(hostname=SLURM_HOST).update(slurm_node=cluster.node)


@contextlib.contextmanager
def slurm_stopped_after(cluster):
    try:
        yield
    finally:
        if cluster is not None:
            cluster.stop(remove=False)


def prepare_simulated_hosts() -> dict[str, str]:
    """One host token per simulated host (kept in VAR_DIR and reused while it still works, so
    repeated demos don't pile up tokens), and the demo's silence threshold on each host."""
    from portal.fleet.models import Host
    from portal.maintenance.rules import AGENT_SILENT
    from portal.maintenance.services.config import rule_config_set
    from portal.telemetry.services import host_token_authenticate, host_token_issue

    store = Path(settings.VAR_DIR) / "demo-agent-tokens.json"
    tokens = json.loads(store.read_text()) if store.exists() else {}
    for hostname, *_ in SIMULATED_HOSTS:
        token = tokens.get(hostname)
        if not token or host_token_authenticate(token) is None:
            tokens[hostname] = host_token_issue(hostname=hostname, label="demo simulator", create_host=True).token
        host = Host.objects.get(hostname=hostname)
        rule_config_set(rule=AGENT_SILENT.key, params={"silent_after_s": DEMO_SILENT_AFTER_S}, host=host)
    store.write_text(json.dumps(tokens))
    store.chmod(0o600)
    return tokens


def backfill_history(now: dt.datetime | None = None, span: dt.timedelta = HISTORY) -> int:
    """A day of healthy training jobs for every simulated GPU, stored through the ingest service
    (so rollups, latest state and evaluation treat it like any batch), once: hosts that already
    have readings are left alone. Returns the number of readings stored."""
    from agents.simulate import SimulatedDeviceClient
    from portal.fleet.models import Host
    from portal.telemetry import store
    from portal.telemetry.schemas import BatchIn
    from portal.telemetry.services.ingest import reading_batch_ingest

    now = now or timezone.now()
    start = now - span
    stored = 0
    for hostname, *_ in SIMULATED_HOSTS:
        host = Host.objects.get(hostname=hostname)
        if store.readings_of(gpu_ids=list(host.gpus.values_list("pk", flat=True)), columns=("ts",), limit=1):
            continue
        clock = _Clock(start.timestamp())
        client = SimulatedDeviceClient(
            count=4, scenarios=["healthy"], hostname=hostname, speed=1.0, clock=clock,
            job_s=HISTORY_JOB_S, pause_s=HISTORY_PAUSE_S,
        )  # fmt: skip
        gpus = [client.inventory(index) for index in client.gpu_indices()]
        readings: list[dict] = []
        moment = start
        while moment < now:
            clock.now = moment.timestamp()
            for index in client.gpu_indices():
                readings.append(_reading(client, index, moment))
            moment += HISTORY_STEP
            if len(readings) >= 400 or moment >= now:
                batch = {
                    "batch_id": str(uuid.uuid4()),
                    "sent_at": _iso(moment),
                    "host": {"hostname": hostname, "agent_version": "demo-backfill", **client.system_info()},
                    "gpus": gpus,
                    "readings": readings,
                }
                with transaction.atomic():
                    stored += reading_batch_ingest(
                        host=host, batch=BatchIn.model_validate_json(json.dumps(batch)), now=now
                    ).accepted
                readings = []
    return stored


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# The day's Slurm jobs get ids of their own: the live agents' schedules start again from job 0
# (agents/simulate.py), and Slurm does not give a job id twice.
BACKFILL_JOB_ID_OFFSET = 1_000_000


def backfill_job_key(key: str) -> str:
    scheduler, _, number = key.partition(":")
    return f"slurm:{int(number) + BACKFILL_JOB_ID_OFFSET}" if scheduler == "slurm" and number.isdigit() else key


def _reading(client, index: int, moment: dt.datetime) -> dict:
    metrics = client.metrics(index)
    jobs = [backfill_job_key(key) for key in client.running_jobs([index])[index]]  # as the agent names them
    return {"gpu_uuid": client.inventory(index)["uuid"], "ts": _iso(moment), **metrics, "xid_events": [], "jobs": jobs}


def agent_commands(base_url: str, speed: float) -> list[tuple[str, str, list[str]]]:
    commands = []
    for hostname, scenarios, host_speed in SIMULATED_HOSTS:
        spool = Path(settings.VAR_DIR) / "demo-spool" / hostname
        spool.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "agents", "--simulate", "4", "--scenario", scenarios, "--hostname", hostname,
            "--speed", str(host_speed or speed), "--interval", str(AGENT_INTERVAL_S), "--url", base_url,
            "--spool-dir", str(spool),
        ]  # fmt: skip
        if not base_url.startswith(("http://127.", "http://localhost", "http://[::1]")):
            # `demo --host <LAN address>`: these agents run on the portal's own machine.
            command.append("--insecure-http")
        commands.append((hostname, scenarios, command))
    return commands


def agent_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(settings.BASE_DIR)}
