"""One agent: collects on a fixed cadence, groups readings into batches, spools them."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid
import zlib
from collections.abc import Callable
from typing import Any

from agents import __version__
from agents.collector import Collector
from agents.push import MemoryQueue
from agents.spool import Spool

log = logging.getLogger(__name__)


class Agent:
    def __init__(
        self,
        *,
        collector: Collector,
        hostname: str,
        spool: Spool | None,
        batch_interval_s: float,
        max_batch_readings: int = 500,
        clock: Callable[[], float] = time.time,
        memory: MemoryQueue | None = None,
    ) -> None:
        self._collector = collector
        self._hostname = hostname
        self._spool = spool
        self._batch_interval_s = batch_interval_s
        self._max_batch_readings = max_batch_readings
        self._clock = clock
        # Batches the spool could not take (full disk): kept here, bounded, and written (or
        # sent) later, oldest first.
        self.memory = memory if memory is not None else MemoryQueue()
        self._spool_failing = False
        self._system_info = collector.system_info()
        self._pending: list[dict[str, Any]] = []
        self._window_start = clock()
        self._inventory: list[dict[str, Any]] = []
        # The first batch after a start always carries the inventory (protocol rule).
        self._send_inventory = True

    def inventory_lost(self) -> None:
        """A rejected batch may have been the one carrying the inventory: send it again."""
        self._send_inventory = True

    def collect(self) -> list[dict[str, Any]]:
        """Collect once; returns the batches this produced (already spooled if there is a spool)."""
        collection = self._collector.collect()
        self._inventory = collection.inventory
        if collection.inventory_changed:
            self._send_inventory = True
            self._system_info = self._collector.system_info()
        self._pending.extend(collection.readings)
        # 0.95: collections land on a fixed cadence, so a window of one interval may be a hair short.
        due = bool(self._pending) and (
            self._clock() - self._window_start >= self._batch_interval_s * 0.95
            or len(self._pending) >= self._max_batch_readings
        )
        # An inventory change goes out at once even without readings (e.g. every GPU lost).
        return self.flush() if due or (self._send_inventory and self._inventory) else []

    def flush(self) -> list[dict[str, Any]]:
        readings, self._pending, self._window_start = self._pending, [], self._clock()
        if not readings and not self._send_inventory:
            return []
        batches = []
        dropped = self._spool.counter("dropped_batches") if self._spool else 0
        rejected = self._spool.counter("rejected_batches") if self._spool else 0
        chunks = [
            readings[i : i + self._max_batch_readings] for i in range(0, len(readings), self._max_batch_readings)
        ] or [[]]
        for chunk in chunks:
            batch: dict[str, Any] = {
                "batch_id": str(uuid.uuid4()),
                "host": {
                    "hostname": self._hostname,
                    "agent_version": __version__,
                    **self._system_info,
                    # Totals since the spool was created, never reset: a count carried by a
                    # batch that is itself lost would otherwise be lost with it.
                    "dropped_batches": dropped,
                    "rejected_batches": rejected,
                },
            }
            if self._send_inventory:
                # In every chunk of this flush: each chunk must stand on its own at the portal.
                batch["gpus"] = self._inventory
            batch["readings"] = chunk
            batches.append(batch)
        if self._spool is None:
            self._send_inventory = False
            return batches
        for batch in batches:
            body, has_inventory = encode(batch), "gpus" in batch
            if not len(self.memory) and self._store(batch["batch_id"], body, has_inventory=has_inventory):
                continue
            if not self.memory.push(batch["batch_id"], body, has_inventory=has_inventory):
                self._send_inventory = True
        self._store_memory()
        return batches

    def _store(self, batch_id: str, body: bytes, *, has_inventory: bool, tried: bool = False) -> bool:
        assert self._spool is not None
        try:
            dropped_now = self._spool.add(batch_id, body, tried=tried)
        except (sqlite3.Error, OSError) as exc:
            if not self._spool_failing:
                log.error(
                    "cannot write to the spool %s (%s): keeping batches in memory (up to %d bytes) "
                    "and trying again every batch",
                    self._spool.path,
                    exc,
                    self.memory.max_bytes,
                )
            self._spool_failing = True
            return False
        if self._spool_failing:
            log.warning("the spool takes batches again")
            self._spool_failing = False
        if has_inventory:
            self._send_inventory = False
        if dropped_now:
            log.error("spool full: %d old batch(es) dropped; the portal hears of it in the next batch", dropped_now)
        return True

    def _store_memory(self) -> None:
        """Write what waits in memory to the spool, oldest first; on failure keep it for later.
        "Send inventory" is cleared only once a batch carrying the inventory is stored."""
        memory = self.memory
        with memory.lock:
            while memory.items:
                batch_id, stored, has_inventory, tried = memory.items[0]
                if not self._store(batch_id, zlib.decompress(stored), has_inventory=has_inventory, tried=tried):
                    return
                memory.items.popleft()
                memory.size -= len(stored)


def encode(batch: dict[str, Any]) -> bytes:
    return json.dumps(batch, separators=(",", ":")).encode()
