"""The daemon: its command line (`gpu-fleet-agent run`, or `python -m agents` without a subcommand)
and its main loop. See `python -m agents --help`."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import sys
import threading
import time

from agents import __version__
from agents.agent import Agent
from agents.collector import Collector, rfc3339
from agents.commands import Diagnostics, DiagnosticStore
from agents.config import Config, ConfigError, load_config, token_location
from agents.device import DeviceClient, DeviceUnavailable, NvmlDeviceClient
from agents.diagnose import Runner, XidLog
from agents.push import Backoff, Deliverer, MemoryQueue, Sender
from agents.simulate import SimulatedDeviceClient, parse_scenarios
from agents.spool import Spool

log = logging.getLogger("agents")

EXIT_CONFIG = 2
EXIT_NO_DEVICE = 3


def open_device(config: Config) -> DeviceClient:
    if config.simulate:
        return SimulatedDeviceClient(
            count=config.simulate,
            scenarios=parse_scenarios(config.scenario),
            hostname=config.hostname,
            speed=config.speed,
        )
    return NvmlDeviceClient()


def find_dcgmi(setting: str) -> str | None:
    """The dcgmi to run, or None: DCGM is not installed (or switched off with 'none')."""
    if not setting or setting.lower() == "none":
        return None
    return shutil.which(setting)


def open_spool(config: Config) -> Spool:
    return Spool(
        config.spool_dir, max_bytes=int(config.spool_max_mb * 1024 * 1024), max_age_s=config.spool_max_age_hours * 3600
    )


def replay_rejected(config: Config) -> int:
    spool = open_spool(config)
    try:
        count = spool.replay_rejected()
    finally:
        spool.close()
    log.warning("%d refused batch(es) put back at the head of the queue in %s", count, spool.path)
    print(f"{count} batch(es) put back in the queue; a running agent sends them next")
    return 0


def run(config: Config, stop: threading.Event, *, token_source: tuple[str, str] | None = None) -> int:
    if config.replay_rejected:
        return replay_rejected(config)
    try:
        device = open_device(config)
    except (DeviceUnavailable, ValueError) as exc:
        log.error("%s (no GPU here? try --simulate N)", exc)
        return EXIT_NO_DEVICE
    try:
        collector = Collector(device, inventory_refresh_s=config.inventory_refresh)
        if config.stdout:
            return print_batches(config, collector, stop)
        return push_batches(config, collector, stop, token_source=token_source, device=device)
    finally:
        device.close()


def print_batches(config: Config, collector: Collector, stop: threading.Event) -> int:
    """No spool, no network: one JSON batch per line (pretty-printed for --once, e.g. a fixture)."""
    agent = Agent(
        collector=collector,
        hostname=config.hostname,
        spool=None,
        batch_interval_s=0,
        max_batch_readings=config.max_batch_readings,
    )
    while True:
        for batch in agent.collect():
            batch["sent_at"] = rfc3339(time.time())
            json.dump(batch, sys.stdout, indent=2 if config.once else None)
            sys.stdout.write("\n")
            sys.stdout.flush()
        if config.once or stop.wait(config.interval):
            return 0


def start_diagnostics_worker(config: Config, collector: Collector, device: DeviceClient, sender: Sender) -> Diagnostics:
    """Diagnostics the portal asks for (ingest-v1 "Commands"), run in threads of their own; the
    collector's XIDs recorded for them."""
    store = DiagnosticStore(config.spool_dir)
    xids = XidLog(store)
    collector.on_xid = xids.add
    dcgmi = find_dcgmi(config.dcgmi)
    runner = Runner(device=device, dcgmi=dcgmi, xids=xids, known_uuids=collector.known_uuids)
    log.info("diagnostics: %s", f"DCGM ({dcgmi})" if dcgmi else "no DCGM: NVML checks at level 1")
    return Diagnostics(runner=runner, store=store, sender=sender)


def collect_until_stopped(config: Config, agent: Agent, deliverer: Deliverer, stop: threading.Event) -> None:
    """Collect every `config.interval` seconds until `stop`, waking the sender when a batch is due."""
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            if agent.collect():
                deliverer.wake.set()
        except Exception:
            log.exception("collection failed; trying again next interval")
        # A fixed cadence rather than sleep(interval): slow NVML calls must not make readings drift.
        next_at += config.interval
        now = time.monotonic()
        if next_at < now:
            next_at = now + config.interval
        stop.wait(next_at - now)


def push_batches(
    config: Config,
    collector: Collector,
    stop: threading.Event,
    *,
    token_source: tuple[str, str] | None = None,
    device: DeviceClient | None = None,
) -> int:
    spool = open_spool(config)
    memory = MemoryQueue(max_bytes=int(config.memory_max_mb * 1024 * 1024))
    agent = Agent(
        collector=collector,
        hostname=config.hostname,
        spool=spool,
        batch_interval_s=config.batch_interval,
        max_batch_readings=config.max_batch_readings,
        memory=memory,
    )
    sender = Sender(
        url=config.url,
        token=config.token,
        timeout_s=config.timeout,
        ca_file=config.ca_file,
        token_file=config.token_file,
        token_source=token_source,
    )
    diagnostics = None
    if device is not None and not config.once:
        diagnostics = start_diagnostics_worker(config, collector, device, sender)
    deliverer = Deliverer(
        spool=spool,
        sender=sender,
        backoff=Backoff(initial_s=config.backoff_initial, max_s=config.backoff_max),
        on_reject=agent.inventory_lost,
        on_answer=diagnostics.offer_answer if diagnostics else None,
        memory=memory,
        max_post_readings=config.max_post_readings,
        max_post_bytes=config.max_post_kb * 1024,
    )
    log.info(
        "agent %s on %s: every %.1f s to %s, spool %s",
        __version__,
        config.hostname,
        config.interval,
        sender.url,
        spool.path,
    )
    try:
        if config.once:
            agent.collect()
            return 0 if deliverer.drain(stop, max_seconds=max(30.0, config.timeout * 3)) else 1
        # Whatever waited in the spool from before a restart leaves first: the sender works
        # strictly oldest first, and new batches queue up behind it.
        sender_thread = threading.Thread(target=deliverer.run, args=(stop,), name="sender", daemon=True)
        sender_thread.start()
        if diagnostics is not None:
            diagnostics.start(stop)
        collect_until_stopped(config, agent, deliverer, stop)
        agent.flush()
        deliverer.wake.set()
        sender_thread.join(timeout=config.timeout + 2)
        if diagnostics is not None:
            diagnostics.join(timeout=config.timeout + 2)
        return 0
    finally:
        if diagnostics is not None:
            diagnostics.store.close()
        spool.close()


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(argv)
        token_source = None if config.stdout else token_location(argv)
    except ConfigError as exc:
        print(f"gpu agent: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=config.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        log.info("signal %d: finishing the current step and stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return run(config, stop, token_source=token_source)
