"""Turns a DeviceClient into protocol readings and inventory, one GPU at a time."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agents.device import DeviceClient, GpuLost, XidEvent

log = logging.getLogger(__name__)

# XIDs for a GPU that produces no reading (lost, silent) wait for its next one; past this
# many the oldest go, so a GPU that never comes back cannot grow memory without end.
MAX_PENDING_XID_PER_GPU = 100


def _rfc3339_slow(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_second: tuple[float, str] = (-1.0, "")  # the last whole second formatted, and its text


def rfc3339(ts: float) -> str:
    """'2026-12-02T10:00:05.120Z': millisecond precision, UTC, as in the protocol's examples.

    Every reading has one, so the date and time of day are formatted once per second; the
    milliseconds are cut from the microseconds as `datetime.fromtimestamp` rounds them (half to
    even, a fraction that rounds up to a whole second carried into it), so the text is the one
    `_rfc3339_slow` writes for every timestamp."""
    global _second
    if not ts >= 0:  # before 1970 (or NaN): not a reading's, the plain way
        return _rfc3339_slow(ts)
    fraction, whole = math.modf(ts)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:
        micro -= 1_000_000
        whole += 1.0
    cached_whole, text = _second
    if whole != cached_whole:
        text = datetime.fromtimestamp(whole, UTC).replace(tzinfo=None).isoformat()
        _second = (whole, text)
    return f"{text}.{micro // 1000:03d}Z"


@dataclass(slots=True)
class Collection:
    readings: list[dict[str, Any]]
    inventory: list[dict[str, Any]]
    inventory_changed: bool


class Collector:
    def __init__(
        self, device: DeviceClient, *, inventory_refresh_s: float = 300.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._device = device
        self._clock = clock
        self._inventory_refresh_s = inventory_refresh_s
        self._inventory: dict[int, dict[str, Any]] = {}
        self._inventory_read_at = float("-inf")
        self._last_inventory: list[dict[str, Any]] | None = None
        self._lost: set[int] = set()
        self._pending_xid: dict[str, list[XidEvent]] = {}
        # Also told of every XID (agents.diagnose.XidLog: "no XID since the last diagnostic").
        self.on_xid: Callable[[list[XidEvent]], None] | None = None

    def system_info(self) -> dict[str, str | None]:
        return self._device.system_info()

    def known_uuids(self) -> dict[int, str]:
        """NVML index -> uuid of every GPU read so far (a GPU that stops answering stays)."""
        return {index: gpu["uuid"] for index, gpu in list(self._inventory.items())}

    def collect(self) -> Collection:
        now = self._clock()
        # Inventory rarely changes but a driver update, a GPU swap or a VBIOS flash must show;
        # re-reading it every few minutes keeps the per-interval cost low.
        refresh = now - self._inventory_read_at >= self._inventory_refresh_s
        if refresh:
            self._inventory_read_at = now
        events = self._device.take_xid_events()
        for event in events:
            pending = self._pending_xid.setdefault(event.gpu_uuid, [])
            pending.append(event)
            del pending[:-MAX_PENDING_XID_PER_GPU]
        if events and self.on_xid is not None:
            try:
                self.on_xid(events)
            except Exception:
                log.exception("recording XID events for diagnostics failed")

        readings = {}
        for index in self._device.gpu_indices():
            try:
                if refresh or index not in self._inventory:
                    self._inventory[index] = self._device.inventory(index)
                metrics = self._device.metrics(index)
            except GpuLost as exc:
                if index not in self._lost:
                    self._lost.add(index)
                    log.error("GPU %d is lost (%s); skipping it, the other GPUs go on", index, exc)
                continue
            except Exception:
                # A bug or an unexpected library error on one GPU must not silence the others.
                log.exception("reading GPU %d failed; skipping it this interval", index)
                continue
            if index in self._lost:
                self._lost.discard(index)
                log.warning("GPU %d answers again", index)
            uuid = self._inventory[index]["uuid"]
            reading = {"gpu_uuid": uuid, "ts": rfc3339(self._clock())}
            reading.update(metrics)
            events = self._pending_xid.pop(uuid, ())
            reading["xid_events"] = [{"ts": rfc3339(e.ts), "code": e.code} for e in events]
            readings[index] = reading
        self._add_jobs(readings)

        inventory = [self._inventory[i] for i in sorted(self._inventory)]
        changed = inventory != self._last_inventory
        if changed:
            self._last_inventory = [dict(gpu) for gpu in inventory]
        return Collection(readings=list(readings.values()), inventory=inventory, inventory_changed=changed)

    def _add_jobs(self, readings: dict[int, dict[str, Any]]) -> None:
        """Each reading's `jobs`, where the device can tell; left out (an older agent's reading)
        where it cannot, so a failure here never costs the reading itself."""
        if not readings:
            return
        try:
            jobs = self._device.running_jobs(list(readings))
        except Exception:
            log.exception("naming the GPUs' jobs failed; these readings carry no jobs")
            return
        for index, reading in readings.items():
            keys = jobs.get(index)
            if keys is not None:
                reading["jobs"] = keys
