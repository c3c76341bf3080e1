"""The SQLite spool: durable, ordered, bounded by size and age, with a drop counter."""

from __future__ import annotations

import json
import sqlite3

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
    dropped = sum(spool.add(f"b-{i}", b"x" * 100) for i in range(5))
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
    spool = Spool(tmp_path, max_bytes=3000)
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
