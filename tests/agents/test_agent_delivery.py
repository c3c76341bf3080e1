"""Delivery against a real local HTTP server: outages, restarts, retries, rejects."""

from __future__ import annotations

import gzip
import json
import os
import signal
import sqlite3
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
from agents.spool import Spool, decompress

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def stub():
    portal = PortalStub()
    yield portal
    portal.stop()


class TickingClock:
    """Every call a second later: each reading gets its own timestamp however fast the test runs."""

    def __init__(self) -> None:
        self.now = time.time() - 3600

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def keys(batches) -> list[tuple[str, str]]:
    return [(r["gpu_uuid"], r["ts"]) for b in batches for r in b["readings"]]


class RunningAgent:
    """An agent with its sender thread running, over a spool directory that outlives it."""

    def __init__(self, spool_dir: Path, url: str, *, timeout_s: float = 0.3, hold_s: float = 0.05) -> None:
        self.spool = Spool(spool_dir)
        device = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-test")
        collector = Collector(device, clock=TickingClock())
        self.agent = Agent(collector=collector, hostname="sim-test", spool=self.spool, batch_interval_s=0)
        self.deliverer = Deliverer(
            spool=self.spool,
            sender=Sender(url=url, token="tok", timeout_s=timeout_s),
            backoff=Backoff(initial_s=0.02, max_s=0.1),
            hold_backoff=Backoff(initial_s=hold_s, max_s=hold_s),
            on_reject=self.agent.inventory_lost,
            idle_wait_s=0.02,
        )
        self.created: list[tuple[str, str]] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.deliverer.run, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def collect(self) -> list[str]:
        batches = self.agent.collect()
        self.created += keys(batches)
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


def test_outage_and_restart_deliver_every_reading_exactly_once_in_order(tmp_path, stub):
    stub.stop()  # the portal is down
    first = RunningAgent(tmp_path, stub.url)
    for _ in range(4):
        first.collect()
    time.sleep(0.2)  # a few failed attempts
    first.stop()  # the agent restarts in the middle of the outage
    assert Spool(tmp_path).pending_count() >= 1

    stub.start()  # back, but flaky at first
    stub.hang_s = 0.6  # longer than the agent's timeout: stored, yet the agent sees no answer
    stub.script = [500, ("429", 0), "drop", 503, "hang"]
    second = RunningAgent(tmp_path, stub.url)
    for _ in range(3):
        second.collect()
    wait_for(lambda: second.spool.pending_ids() == [])
    second.stop()

    assert stub.readings() == first.created + second.created  # exactly once each, in order
    assert len(stub.attempts) > len(stub.stored)  # there were retries
    assert all(protocol_problems(body) == [] for body in stub.bodies)


def test_a_backlog_leaves_in_few_large_posts_and_a_timed_out_post_is_retried_unchanged(tmp_path, stub):
    stub.stop()
    agent = RunningAgent(tmp_path, stub.url, timeout_s=0.3)
    agent.deliverer.wake.clear()
    for _ in range(300):
        agent.agent.collect()  # 300 batches of 2 readings, while the portal is down
    agent.created = []
    stub.start()
    stub.hang_s = 0.6
    stub.script = ["hang"]  # the first post is stored but its answer comes too late
    agent.deliverer.wake.set()
    wait_for(lambda: agent.spool.pending_ids() == [])
    agent.stop()
    (_, first_id), (_, second_id) = stub.attempts[:2]
    assert first_id == second_id  # the retry carried the same batch_id: the portal's dedupe held
    readings = stub.readings()
    assert len(readings) == 600 and len(set(readings)) == 600
    assert len(stub.stored) <= 5  # packed, not 300 posts
    assert all(len(b["readings"]) <= 5000 for b in stub.bodies)


def test_a_merged_batch_is_durable_before_it_is_sent(tmp_path):
    spool = Spool(tmp_path)
    for i in range(3):
        body = {"batch_id": f"b-{i}", "host": {"hostname": "h"}, "readings": [{"gpu_uuid": "GPU-1", "ts": str(i)}]}
        spool.add(f"b-{i}", json.dumps(body).encode())
    sent = spool.next_to_send()
    assert sent.parts == 3 and sent.attempts == 1
    spool.close()  # the agent dies while the post is in flight
    reopened = Spool(tmp_path)
    again = reopened.next_to_send()  # tried once: never merged again, so the same batch_id
    assert again.batch_id == sent.batch_id and again.body == sent.body and again.attempts == 2
    reopened.add("b-3", b'{"batch_id":"b-3","host":{"hostname":"h"},"readings":[]}')
    assert reopened.next_to_send().batch_id == sent.batch_id


def test_merging_stops_at_an_inventory_change_and_at_the_limits(tmp_path):
    spool = Spool(tmp_path)

    def add(name, gpus=None, readings=1):
        body = {"batch_id": name, "host": {"hostname": "h"}, "readings": [{"gpu_uuid": "G", "ts": "t"}] * readings}
        if gpus is not None:
            body["gpus"] = gpus
        spool.add(name, json.dumps(body).encode())

    add("a", gpus=[{"uuid": "G", "index": 0}])
    add("b")
    add("c", gpus=[{"uuid": "G", "index": 0}])  # the same inventory joins
    add("d", gpus=[{"uuid": "G", "index": 1}])  # a changed one starts a new post
    add("e", readings=3)
    add("f", readings=3)
    first = spool.next_to_send()
    assert first.parts == 3 and json.loads(first.body)["gpus"] == [{"uuid": "G", "index": 0}]
    spool.remove(first.id)
    second = spool.next_to_send(max_readings=5)
    assert second.parts == 2 and len(json.loads(second.body)["readings"]) == 4
    spool.remove(second.id)
    assert spool.next_to_send(max_readings=5).parts == 1


def test_a_refused_reading_in_a_merged_batch_costs_only_itself(tmp_path, stub, caplog):
    stub.stop()
    agent = RunningAgent(tmp_path, stub.url)
    for _ in range(20):
        agent.collect()
    bad = agent.created[17]
    stub.reject_reading = lambda r: (r["gpu_uuid"], r["ts"]) == bad
    stub.start()
    agent.deliverer.wake.set()
    wait_for(lambda: agent.spool.pending_ids() == [])
    agent.stop()
    assert stub.readings() == [key for key in agent.created if key != bad]
    ((_, status, _),) = agent.spool.rejected() if False else Spool(tmp_path).rejected()
    assert status == 400
    assert any("REJECTED" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


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
    ids = [agent.collect()[0]["batch_id"] for _ in range(1)]
    stub.reject_ids = {ids[0]}  # the one that carried the inventory
    assert deliverer.drain(max_seconds=5)
    assert stub.stored == []
    assert spool.rejected() == [(ids[0], 400, stub_detail())]
    assert any("REJECTED" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    # The rejected batch may have been the only one with the inventory: the next one carries it again.
    (batch,) = agent.collect()
    assert "gpus" in batch and batch["host"]["rejected_batches"] == 1
    assert deliverer.drain(max_seconds=5) and stub.stored[-1] == batch["batch_id"]

    # Once the cause is fixed, --replay-rejected sends it again, ahead of newer batches.
    stub.reject_ids = set()
    agent.collect()
    assert spool.replay_rejected() == 1 and spool.rejected() == []
    assert spool.pending_ids()[0] == ids[0]
    assert deliverer.drain(max_seconds=5) and ids[0] in stub.stored


def stub_detail() -> str:
    return '{"error": "invalid", "detail": [{"loc": "gpus.0.temp_shutdown_c", "msg": "no"}]}'


@pytest.mark.parametrize(
    "cue",
    [
        401,  # the token was revoked or rotated
        (403, {"error": "GPU GPU-1 belongs to host dgx-02"}),  # a GPU moved between hosts
        (400, {"error": "bad ts", "detail": [{"loc": "readings.0.ts", "msg": "more than 5 min in the future"}]}),
        ("raw", 400, "<!doctype html><h1>Bad Request (400)</h1>"),  # Django's host check: ALLOWED_HOSTS
        ("raw", 404, "<h1>Not Found</h1>"),  # a proxy, a wrong path
        ("raw", 301, ""),  # http:// for https://
    ],
)
def test_fixable_refusals_keep_the_batch_and_retry_slowly_and_loudly(tmp_path, stub, caplog, cue):
    spool = Spool(tmp_path)
    spool.add("b-1", b'{"batch_id": "b-1", "host": {"hostname": "h"}, "readings": []}')
    spool.add("b-2", b'{"batch_id": "b-2", "host": {"hostname": "h"}, "readings": []}')
    if cue == 401:
        stub.token = "rotated"
    else:
        stub.script = [cue, cue]
    deliverer = Deliverer(
        spool=spool,
        sender=Sender(url=stub.url, token="tok", timeout_s=1),
        backoff=Backoff(initial_s=0.01, max_s=0.02),
        hold_backoff=Backoff(initial_s=0.4, max_s=0.4),
    )
    first_delay = deliverer.step()
    assert first_delay >= 0.2  # slowly: not the short backoff of a 5xx
    assert spool.rejected() == [] and spool.pending_count() == 1  # kept (b-1 and b-2 merged)
    assert any("PORTAL REFUSED" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    stub.token = "tok"  # a person fixed it
    stub.script = stub.script[:0] if cue == 401 else stub.script
    assert deliverer.drain(max_seconds=5)
    assert spool.rejected() == [] and spool.pending_count() == 0
    assert len(stub.stored) == 1


def test_a_rotated_token_in_the_token_file_is_picked_up(tmp_path, stub):
    token_file = tmp_path / "token"
    token_file.write_text("old\n")
    spool = Spool(tmp_path)
    spool.add("b-1", b'{"batch_id": "b-1", "host": {"hostname": "h"}, "readings": []}')
    stub.token = "new"
    token_file.write_text("new\n")
    sender = Sender(url=stub.url, token="old", token_file=str(token_file))
    deliverer = Deliverer(spool=spool, sender=sender, backoff=Backoff(initial_s=0.01, max_s=0.02))
    assert deliverer.drain(max_seconds=5) and stub.stored == ["b-1"]


def test_a_413_cuts_the_backlog_into_smaller_posts(tmp_path, stub):
    spool = Spool(tmp_path)
    for i in range(8):
        body = {"batch_id": f"b-{i}", "host": {"hostname": "h"}, "readings": [{"gpu_uuid": "G", "ts": str(i)}]}
        spool.add(f"b-{i}", json.dumps(body).encode())
    stub.script = [(413, {"error": "body too large"})]
    deliverer = Deliverer(spool=spool, sender=Sender(url=stub.url, token="tok"), backoff=Backoff())
    assert deliverer.drain(max_seconds=5)
    assert sorted(r[1] for r in stub.readings()) == [str(i) for i in range(8)]
    assert spool.rejected() == []


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


def test_default_backoff_is_short_like_prometheus_remote_write():
    from agents.config import Config

    config = Config()
    assert (config.backoff_initial, config.backoff_max) == (Backoff().initial_s, Backoff().max_s)
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(40)]
    assert delays[0] <= 0.1  # from ~100 ms
    assert max(delays) <= 5.0 and sum(delays) < 200  # capped at seconds, not minutes
    assert backoff.next_delay(retry_after=12) == 12  # Retry-After still wins


def test_replay_rejected_command(tmp_path):
    spool = Spool(tmp_path)
    spool.add("b-1", b'{"batch_id":"b-1","host":{"hostname":"h"},"readings":[]}')
    spool.reject(spool.oldest().id, status=400, reason="odd inventory")
    spool.close()
    result = subprocess.run(
        [sys.executable, "-m", "agents", "--replay-rejected", "--spool-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in {**os.environ, "PYTHONPATH": str(REPO)}.items() if not k.startswith("GPU_AGENT_")},
    )
    assert result.returncode == 0, result.stderr
    assert "1 batch(es) put back" in result.stdout
    spool = Spool(tmp_path)
    assert spool.pending_ids() == ["b-1"] and spool.rejected() == []


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


def spooled_readings(spool_dir: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(Path(spool_dir) / "spool.db")
    bodies = [json.loads(decompress(row[0])) for row in db.execute("SELECT body FROM batch ORDER BY id")]
    db.close()
    return keys(bodies)


def spooled_count(spool_dir: Path) -> int:
    """How many readings the agent has spooled so far: 0 before it made its spool."""
    if not (Path(spool_dir) / "spool.db").exists():
        return 0
    try:
        return len(spooled_readings(spool_dir))
    except sqlite3.OperationalError:  # not made yet, or locked by a write: asked again
        return 0


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
    wait_for(lambda: spooled_count(tmp_path) >= 6)  # however long the agent took to start
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    spooled = spooled_readings(tmp_path)
    assert len(spooled) >= 6

    stub.start()
    process = run_agent(args, env)
    wait_for(lambda: len(stub.readings()) >= len(spooled) + 6)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr

    assert stub.readings()[: len(spooled)] == spooled
    assert len(set(stub.stored)) == len(stub.stored)
    assert len(set(stub.readings())) == len(stub.readings())
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
