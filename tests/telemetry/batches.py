"""Protocol-exact ingest-v1 batches (shared/protocol/ingest-v1.md) and a small client for the endpoint.

Every dict here is what a real agent sends: all reading metrics present (null where unsupported),
RFC 3339 timestamps with a zone. Tests change one thing at a time with overrides.
"""

import datetime as dt
import gzip
import json
import uuid as uuidlib

from django.test import Client
from django.utils import timezone

INGEST_URL = "/api/v1/ingest"


def iso(moment: dt.datetime) -> str:
    """RFC 3339 in UTC with a 'Z', millisecond precision, as the agent writes it."""
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def gpu_uuid(n: int) -> str:
    return f"GPU-{n:08x}-6b9b-4b4e-9d0a-6f1c1a2b3c4d"


def make_gpu(uuid: str, index: int = 0, **overrides) -> dict:
    gpu = {
        "uuid": uuid,
        "index": index,
        "name": "NVIDIA H200",
        "serial": f"1650724{index:06d}",
        "pci_bus_id": f"00000000:{0x1B + index:02X}:00.0",
        "vbios_version": "96.00.A5.00.01",
        "memory_total_mib": 143771,
        "power_limit_default_w": 700.0,
        "temp_slowdown_c": 90,
        "temp_shutdown_c": 95,
        "pcie_link_gen_max": 5,
        "pcie_link_width_max": 16,
    }
    gpu.update(overrides)
    return gpu


def make_reading(uuid: str, ts: dt.datetime, **overrides) -> dict:
    reading = {
        "gpu_uuid": uuid,
        "ts": iso(ts),
        "temperature_c": 64,
        "fan_speed_pct": None,
        "power_w": 412.25,
        "power_limit_w": 700.0,
        "energy_mj": 123456.789,
        "utilization_gpu_pct": 97,
        "utilization_memory_pct": 41,
        "memory_used_mib": 80211,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201,
        "pstate": 0,
        "throttle_reasons": ["sw_power_cap"],
        "ecc_corrected_volatile": 0,
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
        "retired_pages_pending": False,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "pcie_link_gen": 5,
        "pcie_link_width": 16,
        "pcie_replay_count": 0,
        "xid_events": [],
    }
    reading.update(overrides)
    return reading


DEFAULT_GPUS = (gpu_uuid(0),)


def make_batch(
    hostname: str,
    gpus=DEFAULT_GPUS,
    readings: int = 1,
    now: dt.datetime | None = None,
    step: dt.timedelta = dt.timedelta(seconds=1),
    inventory: bool = True,
    host: dict | None = None,
    **overrides,
) -> dict:
    """A batch of `readings` readings, round-robin over `gpus` (uuids or make_gpu dicts), the last
    one at `now`, one `step` apart per round. `inventory=False` leaves `gpus` out."""
    now = now or timezone.now()
    gpu_dicts = [make_gpu(g, index=i) if isinstance(g, str) else g for i, g in enumerate(gpus)]
    uuids = [g["uuid"] for g in gpu_dicts]
    rounds = -(-readings // len(uuids)) if uuids else 0
    rows = []
    for position in range(readings):
        round_, which = divmod(position, len(uuids))
        ts = now - step * (rounds - 1 - round_)
        rows.append(make_reading(uuids[which], ts))
    batch = {
        "batch_id": str(uuidlib.uuid4()),
        "sent_at": iso(now),
        "host": {
            "hostname": hostname,
            "agent_version": "0.1.0",
            "driver_version": "580.65.06",
            "cuda_driver_version": "13.0",
            "nvml_version": "13.580.65.06",
            **(host or {}),
        },
        "gpus": gpu_dicts if inventory else [],
        "readings": rows,
    }
    batch.update(overrides)
    return batch


def post_batch(
    client: Client,
    token: str | None,
    batch: dict | None = None,
    *,
    body: bytes | str | None = None,
    compress: bool = False,
    content_type: str = "application/json",
    scheme: str = "Bearer",
    secure: bool = False,
    **headers,
):
    """POST a batch (or a raw body) to the ingest endpoint the way the agent does."""
    if body is None:
        body = json.dumps(batch, separators=(",", ":"))
    if isinstance(body, str):
        body = body.encode()
    if compress:
        body = gzip.compress(body)
        headers.setdefault("content_encoding", "gzip")
    extra = {f"HTTP_{name.upper()}": value for name, value in headers.items()}
    if token is not None:
        extra["HTTP_AUTHORIZATION"] = f"{scheme} {token}"
    return client.generic("POST", INGEST_URL, body, content_type=content_type, secure=secure, **extra)
