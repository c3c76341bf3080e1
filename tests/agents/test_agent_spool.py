"""The SQLite spool: durable, ordered, bounded by size and age, with a drop counter."""

from __future__ import annotations

import json
import os
import sqlite3
import zlib

from agents.agent import Agent
from agents.collector import Collector
from agents.simulate import SimulatedDeviceClient
from agents.spool import Spool


def test_batches_survive_a_reopen_oldest_first(tmp_path):
    spool = Spool(tmp_path)
    for i in range(3):
        spool.add(f"b-{i}", b"{}")
    spool.close()
    spool = Spool(tmp_path)
    assert spool.pending_ids() == ["b-0", "b-1", "b-2"]
    assert spool.oldest().batch_id == "b-0"
    assert sqlite3.connect(spool.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_size_bound_drops_the_oldest_and_counts_them(tmp_path, caplog):
    spool = Spool(tmp_path, max_bytes=250)
    dropped = sum(spool.add(f"b-{i}", os.urandom(100)) for i in range(5))  # incompressible
    assert dropped == 3
    assert spool.pending_ids() == ["b-3", "b-4"]
    assert spool.counter("dropped_batches") == 3
    assert any(r.levelname == "ERROR" and "dropped" in r.getMessage() for r in caplog.records)


def test_the_newest_batch_is_kept_even_alone_over_the_bound(tmp_path):
    spool = Spool(tmp_path, max_bytes=10)
    spool.add("big", b"x" * 100)
    assert spool.pending_ids() == ["big"]


def test_age_bound_drops_old_batches(tmp_path):
    now = [1_000_000.0]
    spool = Spool(tmp_path, max_age_s=3600, clock=lambda: now[0])
    spool.add("old", b"{}")
    now[0] += 1800
    spool.add("newer", b"{}")
    now[0] += 2000
    assert spool.enforce_bounds() == 1
    assert spool.pending_ids() == ["newer"]
    assert spool.counter("dropped_batches") == 1


def test_the_drop_counter_reaches_the_portal_in_the_next_batch(tmp_path):
    spool = Spool(tmp_path, max_bytes=1500)
    device = SimulatedDeviceClient(count=1, scenarios=["healthy"], hostname="sim-test")
    agent = Agent(collector=Collector(device), hostname="sim-test", spool=spool, batch_interval_s=0)
    batches = [agent.collect()[0] for _ in range(6)]
    assert batches[0]["host"]["dropped_batches"] == 0
    assert 0 < batches[-1]["host"]["dropped_batches"] <= spool.counter("dropped_batches")
    assert json.loads(spool.oldest().body)["host"]["dropped_batches"] >= 0
    reopened = Spool(tmp_path)  # the count is kept across restarts
    assert reopened.counter("dropped_batches") == spool.counter("dropped_batches")


def test_reject_moves_a_batch_aside_and_bounds_the_pile(tmp_path):
    spool = Spool(tmp_path, keep_rejected=2)
    for i in range(4):
        spool.add(f"b-{i}", b"{}")
        spool.reject(spool.oldest().id, status=400, reason=f"bad {i}")
    assert spool.pending_ids() == []
    assert spool.rejected() == [("b-2", 400, "bad 2"), ("b-3", 400, "bad 3")]
    assert spool.counter("rejected_batches") == 4


def test_bodies_are_stored_compressed_and_old_plain_ones_still_read(tmp_path):
    body = json.dumps({"batch_id": "b-1", "readings": [{"temperature_c": 60}] * 200}).encode()
    spool = Spool(tmp_path)
    spool.add("b-1", body)
    (stored,) = sqlite3.connect(spool.path).execute("SELECT body FROM batch").fetchone()
    assert zlib.decompress(stored) == body and len(stored) < len(body) / 5
    assert spool.oldest().body == body
    # A spool written by an earlier agent (plain JSON bodies) is read as it is.
    with sqlite3.connect(spool.path) as db:
        db.execute("INSERT INTO batch (batch_id, created_at, body) VALUES ('b-0', ?, ?)", (1e12, b'{"batch_id":"b-0"}'))
    spool.remove(spool.oldest().id)
    assert spool.oldest().body == b'{"batch_id":"b-0"}'


def test_defaults_keep_a_week_for_a_72_hour_outage(tmp_path):
    from agents.config import Config

    config = Config()
    assert 72 < config.spool_max_age_hours < 168  # under the portal's 7 days, so what is kept is accepted
    assert Spool(tmp_path).max_age_s == config.spool_max_age_hours * 3600
    # 8 GPUs every 10 s for 72 h, at the compressed size of simulated batches, fit the default bound.
    device = SimulatedDeviceClient(count=8, scenarios=["healthy", "xid", "throttle"], hostname="sim-x")
    agent = Agent(collector=Collector(device), hostname="sim-x", spool=None, batch_interval_s=0)
    sizes = [len(zlib.compress(json.dumps(agent.collect()[0]).encode(), 6)) for _ in range(20)]
    assert max(sizes[1:]) * 6 * 60 * 72 < config.spool_max_mb * 1024 * 1024


def test_a_corrupt_spool_is_moved_aside_and_a_fresh_one_started(tmp_path, caplog):
    spool = Spool(tmp_path)
    spool.add("b-1", b"{}")
    spool.close()
    (tmp_path / "spool.db-wal").unlink(missing_ok=True)
    (tmp_path / "spool.db").write_bytes(b"this is not a database" * 500)
    spool = Spool(tmp_path)  # no exception: the agent starts
    assert spool.pending_ids() == []
    spool.add("b-2", b"{}")
    assert spool.pending_ids() == ["b-2"]
    aside = [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert aside and (tmp_path / aside[0]).read_bytes().startswith(b"this is not")
    assert any(r.levelname == "ERROR" and "corrupt" in r.getMessage() for r in caplog.records)


def test_an_unreadable_batch_is_set_aside_not_a_crash(tmp_path):
    spool = Spool(tmp_path)
    with sqlite3.connect(spool.path) as db:
        db.execute("INSERT INTO batch (batch_id, created_at, body) VALUES ('bad', ?, ?)", (1e12, b"\x78garbage"))
    spool.max_age_s = 1e13
    spool.add("good", b'{"batch_id":"good","host":{"hostname":"h"},"readings":[]}', created_at=1e12)
    assert spool.next_to_send().batch_id == "good"
    assert [r[0] for r in spool.rejected()] == ["bad"]


class FullDiskSpool(Spool):
    full = True

    def add(self, *args, **kwargs):
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        return super().add(*args, **kwargs)


def test_a_full_disk_keeps_batches_in_memory_and_the_inventory_flag_until_stored(tmp_path, caplog):
    spool = FullDiskSpool(tmp_path)
    device = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-test")
    agent = Agent(collector=Collector(device), hostname="sim-test", spool=spool, batch_interval_s=0)
    first = agent.collect()  # carries the inventory, cannot be stored
    assert "gpus" in first[0] and len(agent.memory) == 1
    second = agent.collect()
    assert "gpus" in second[0]  # not cleared: nothing with the inventory is stored yet
    assert any(r.levelname == "ERROR" and "memory" in r.getMessage() for r in caplog.records)
    spool.full = False
    third = agent.collect()
    assert "gpus" in third[0]
    assert spool.pending_ids() == [first[0]["batch_id"], second[0]["batch_id"], third[0]["batch_id"]]
    assert len(agent.memory) == 0
    assert "gpus" not in agent.collect()[0]  # stored now: the inventory went with it


def test_the_memory_queue_is_bounded_and_asks_for_the_inventory_again(tmp_path):
    from agents.push import MemoryQueue

    spool = FullDiskSpool(tmp_path)
    device = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-test")
    memory = MemoryQueue(max_bytes=3000)
    agent = Agent(collector=Collector(device), hostname="sim-test", spool=spool, batch_interval_s=0, memory=memory)
    for _ in range(30):
        agent.collect()
    assert memory.size <= 3000 and memory.dropped > 0
    spool.full = False
    (batch,) = agent.collect()
    assert "gpus" in batch  # the one that carried it was dropped from memory


def test_memory_batches_are_sent_when_the_spool_is_empty(tmp_path):
    from portal_stub import PortalStub

    from agents.push import Backoff, Deliverer, Sender

    stub = PortalStub()
    try:
        spool = FullDiskSpool(tmp_path)
        device = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-test")
        agent = Agent(collector=Collector(device), hostname="sim-test", spool=spool, batch_interval_s=0)
        ids = [agent.collect()[0]["batch_id"] for _ in range(3)]
        deliverer = Deliverer(
            spool=spool, sender=Sender(url=stub.url, token="tok"), backoff=Backoff(), memory=agent.memory
        )
        for _ in range(5):
            deliverer.step()
        assert stub.stored == ids and len(agent.memory) == 0
    finally:
        stub.stop()
