"""Delivery against a real local HTTP server: outages, restarts, retries, rejects."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from portal_stub import PortalStub
from protocol_check import parse_ts, protocol_problems

from agents.agent import Agent
from agents.collector import Collector
from agents.push import Backoff, Deliverer, Sender, ingest_url, parse_retry_after
from agents.simulate import SimulatedDeviceClient
from agents.spool import Spool

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stub():
    portal = PortalStub()
    yield portal
    portal.stop()


class RunningAgent:
    """An agent with its sender thread running, over a spool directory that outlives it."""

    def __init__(self, spool_dir: Path, url: str, *, timeout_s: float = 0.3) -> None:
        self.spool = Spool(spool_dir)
        device = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-test")
        self.agent = Agent(collector=Collector(device), hostname="sim-test", spool=self.spool, batch_interval_s=0)
        self.deliverer = Deliverer(
            spool=self.spool,
            sender=Sender(url=url, token="tok", timeout_s=timeout_s),
            backoff=Backoff(initial_s=0.02, max_s=0.1),
            on_reject=self.agent.inventory_lost,
            idle_wait_s=0.02,
        )
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.deliverer.run, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def collect(self) -> list[str]:
        batches = self.agent.collect()
        self.deliverer.wake.set()
        return [b["batch_id"] for b in batches]

    def stop(self) -> None:
        self.stop_event.set()
        self.deliverer.wake.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()
        self.spool.close()


def wait_for(predicate, timeout=10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def assert_sent_in_order(stub: PortalStub, expected: list[str]) -> None:
    # Never a newer batch before an older one was accepted: the attempts only move forward.
    order = {batch_id: i for i, batch_id in enumerate(expected)}
    tried = [order[batch_id] for _, batch_id in stub.attempts]
    assert tried == sorted(tried)


def test_outage_and_restart_deliver_every_batch_exactly_once_in_order(tmp_path, stub):
    stub.stop()  # the portal is down
    first = RunningAgent(tmp_path, stub.url)
    created = []
    for _ in range(4):
        created += first.collect()
    time.sleep(0.2)  # a few failed attempts
    first.stop()  # the agent restarts in the middle of the outage
    assert Spool(tmp_path).pending_ids() == created

    stub.start()  # back, but flaky at first
    stub.hang_s = 0.6  # longer than the agent's timeout: stored, yet the agent sees no answer
    stub.script = [500, ("429", 0), "drop", 503, "hang"]
    second = RunningAgent(tmp_path, stub.url)
    for _ in range(3):
        created += second.collect()
    wait_for(lambda: second.spool.pending_ids() == [])
    second.stop()

    assert stub.stored == created  # exactly once each, in order
    assert_sent_in_order(stub, created)
    assert len(stub.attempts) > len(created)  # there were retries
    assert all(protocol_problems(body) == [] for body in stub.bodies)


def test_a_rejected_batch_is_set_aside_and_the_agent_goes_on(tmp_path, stub, caplog):
    spool = Spool(tmp_path)
    device = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-test")
    agent = Agent(collector=Collector(device), hostname="sim-test", spool=spool, batch_interval_s=0)
    deliverer = Deliverer(
        spool=spool,
        sender=Sender(url=stub.url, token="tok", timeout_s=1),
        backoff=Backoff(initial_s=0.01, max_s=0.05),
        on_reject=agent.inventory_lost,
    )
    ids = [agent.collect()[0]["batch_id"] for _ in range(3)]
    stub.reject_ids = {ids[0]}  # the one that carried the inventory
    assert deliverer.drain(max_seconds=5)

    assert stub.stored == [ids[1], ids[2]]
    assert spool.rejected() == [(ids[0], 400, stub_detail())]
    assert any("REJECTED" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    # The rejected batch may have been the only one with the inventory: the next one carries it again.
    (batch,) = agent.collect()
    assert "gpus" in batch and batch["host"]["rejected_batches"] == 1
    assert deliverer.drain(max_seconds=5) and stub.stored[-1] == batch["batch_id"]


def stub_detail() -> str:
    return '{"error": "invalid", "detail": [{"loc": "readings.0", "msg": "no"}]}'


def test_a_wrong_token_is_a_4xx_and_sets_the_batch_aside(tmp_path, stub):
    spool = Spool(tmp_path)
    spool.add("b-1", b'{"batch_id": "b-1", "host": {"hostname": "h"}, "readings": []}')
    deliverer = Deliverer(spool=spool, sender=Sender(url=stub.url, token="wrong"), backoff=Backoff())
    assert deliverer.drain(max_seconds=5)
    assert [(batch_id, status) for batch_id, status, _ in spool.rejected()] == [("b-1", 401)]


def test_retry_after_is_honoured(tmp_path, stub):
    spool = Spool(tmp_path)
    spool.add("b-1", b'{"batch_id": "b-1", "host": {"hostname": "h"}, "readings": []}')
    stub.script = [("429", 1)]
    deliverer = Deliverer(
        spool=spool, sender=Sender(url=stub.url, token="tok"), backoff=Backoff(initial_s=0.01, max_s=0.02)
    )
    assert deliverer.drain(max_seconds=5)
    (t0, _), (t1, _) = stub.attempts
    assert t1 - t0 >= 0.95
    assert stub.stored == ["b-1"]


def test_the_request_is_gzip_json_with_bearer_token_and_fresh_sent_at(tmp_path, stub):
    spool = Spool(tmp_path)
    spool.add("b-1", b'{"batch_id": "b-1", "host": {"hostname": "h"}, "readings": []}', created_at=time.time() - 60)
    assert Deliverer(spool=spool, sender=Sender(url=stub.url + "/", token="tok"), backoff=Backoff()).drain()
    (headers,) = stub.headers
    assert headers["Authorization"] == "Bearer tok"
    assert headers["Content-Encoding"] == "gzip" and headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("gpu-fleet-agent/")
    assert abs(parse_ts(stub.bodies[0]["sent_at"]) - time.time()) < 5  # the send, not the collection


def test_backoff_grows_with_jitter_up_to_the_cap():
    backoff = Backoff(initial_s=1, max_s=8)
    delays = [backoff.next_delay() for _ in range(6)]
    assert [0.5 <= delays[0] <= 1, 1 <= delays[1] <= 2, 2 <= delays[2] <= 4] == [True] * 3
    assert all(4 <= d <= 8 for d in delays[3:])
    assert len({round(d, 6) for d in delays[3:]}) > 1  # jittered, not in lockstep
    assert backoff.next_delay(retry_after=30) == 30
    backoff.reset()
    assert backoff.next_delay() <= 1


def test_retry_after_forms():
    assert parse_retry_after("7") == 7
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert parse_retry_after("999999") == 3600


def test_ingest_url_accepts_base_or_full_url():
    assert ingest_url("https://p.example.com") == "https://p.example.com/api/v1/ingest"
    assert ingest_url("https://p.example.com/api/v1/ingest") == "https://p.example.com/api/v1/ingest"


def test_tls_uses_the_given_ca_file(tmp_path):
    with pytest.raises(OSError):  # the file is read when the context is built: a typo fails at start
        Sender(url="https://p.example.com", token="t", ca_file=str(tmp_path / "missing.pem"))


def run_agent(args: list[str], env_extra: dict) -> subprocess.Popen:
    env = {**os.environ, **env_extra, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "agents", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_agent_processes_sigterm_and_restart_lose_nothing(tmp_path, stub):
    args = [
        "--simulate",
        "2",
        "--scenario",
        "healthy,xid",
        "--speed",
        "3600",
        "--hostname",
        "sim-proc",
        "--interval",
        "0.1",
        "--spool-dir",
        str(tmp_path),
        "--timeout",
        "0.5",
        "--backoff-initial",
        "0.05",
        "--backoff-max",
        "0.2",
    ]
    env = {"GPU_AGENT_URL": stub.url, "GPU_AGENT_TOKEN": "tok"}
    stub.stop()
    process = run_agent(args, env)
    time.sleep(1.5)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    spooled = Spool(tmp_path).pending_ids()
    assert len(spooled) >= 3

    stub.start()
    process = run_agent(args, env)
    wait_for(lambda: len(stub.stored) >= len(spooled) + 3)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr

    assert stub.stored[: len(spooled)] == spooled
    assert len(set(stub.stored)) == len(stub.stored)
    assert all(protocol_problems(body) == [] for body in stub.bodies)
    uuids = {r["gpu_uuid"] for body in stub.bodies for r in body["readings"]}
    assert len(uuids) == 2  # the same two GPUs across the restart


def test_once_stdout_prints_one_valid_batch_without_network(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "agents", "--once", "--stdout", "--simulate", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    import json

    batch = json.loads(result.stdout)
    assert protocol_problems(batch) == []
    assert len(batch["readings"]) == 3 and len(batch["gpus"]) == 3


def test_gzip_roundtrip_sanity():
    assert gzip.decompress(gzip.compress(b"{}")) == b"{}"
