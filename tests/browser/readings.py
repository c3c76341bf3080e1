"""Readings posted to a browser test's portal through the ingest API, as an agent on dgx-01 (the
demo seed's first host) sends them."""

import datetime as dt
import uuid as uuidlib

from portal.telemetry.models import READING_METRICS as METRICS
from tests.portal_process import ingest_post

HOST = "dgx-01"
GPU_UUID = "GPU-demo0000-0000-4000-8000-000000000000"  # dgx-01 #0 in the demo seed (slowdown 87 °C)


def gpu_uuid(index: int) -> str:
    """dgx-01's GPU `index` (0-9) in the demo seed."""
    return f"GPU-demo000{index}-0000-4000-8000-00000000000{index}"


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def reading(ts: dt.datetime, temperature: int, **values) -> dict:
    return {
        **dict.fromkeys(METRICS),
        "gpu_uuid": GPU_UUID,
        "ts": iso(ts),
        "temperature_c": temperature,
        "fan_speed_pct": 40 + (temperature - 50) // 2,
        "power_w": 520.0 + temperature,
        "power_limit_w": 700.0,
        "utilization_gpu_pct": 96,
        "utilization_memory_pct": 44,
        "memory_used_mib": 61000,
        "sm_clock_mhz": 1980 if temperature < 85 else 1400,
        "mem_clock_mhz": 2619,
        "throttle_reasons": ["sw_thermal"] if temperature >= 85 else [],
        **values,
    }


def post_readings(base_url: str, token: str, readings: list[dict]) -> None:
    body = {
        "batch_id": str(uuidlib.uuid4()),
        "sent_at": iso(dt.datetime.now(dt.UTC)),
        "host": {"hostname": HOST, "agent_version": "0.1.0", "driver_version": "570.133.20"},
        "gpus": [],
        "readings": readings,
    }
    status, answer = ingest_post(base_url, token, body, timeout=10)
    assert status == 202, answer


def host_token_issue(portal) -> str:
    """A new agent token for dgx-01 on `portal` (a PortalProcess)."""
    return portal.manage("issue_token", HOST, "--label", "browser test").stdout.strip().splitlines()[-1]


def recent_minutes_post(portal, *, gpus: int = 4, minutes: int = 10) -> None:
    """The last `minutes` of readings, one per 5 s, for dgx-01's first `gpus` GPUs, each a few
    degrees warmer than the one before (GPU 3 runs hot and throttles): the charts have lines to
    hover and the fleet heatmap has colours."""
    now = dt.datetime.now(dt.UTC)
    readings = [
        reading(now - dt.timedelta(seconds=second), 60 + 8 * index + (second // 5) % 4, gpu_uuid=gpu_uuid(index))
        for index in range(gpus)
        for second in range(minutes * 60, 0, -5)
    ]
    post_readings(portal.base_url, host_token_issue(portal), readings)
