"""Remote write requests built by hand, as Prometheus sends them (snappy around a WriteRequest)."""

import datetime as dt

import orjson
from django.test import Client
from django.utils import timezone

from portal.remote_write.models import PendingReading
from portal.remote_write.wire import snappy_compress, write_request_encode

HOSTNAME = "prom-node-1"
UUID_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
UUID_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"


def ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def instant(stamp_ms: int) -> dt.datetime:
    """The moment of a sample's timestamp (milliseconds since the epoch): `ms` the other way."""
    return dt.datetime.fromtimestamp(stamp_ms / 1000, dt.UTC)


def now_ms(offset_s: float = 0) -> int:
    return ms(timezone.now() + dt.timedelta(seconds=offset_s))


def labels(name: str, *, uuid: str = UUID_A, hostname: str | None = HOSTNAME, gpu: str = "0", **extra) -> dict:
    out = {"__name__": name, "UUID": uuid, "gpu": gpu, "modelName": "NVIDIA H100 80GB HBM3",
           "pci_bus_id": "00000000:1B:00.0", "DCGM_FI_DRIVER_VERSION": "580.65.06", "instance": "exporter:9400",
           "job": "dcgm"}  # fmt: skip
    if hostname is not None:
        out["Hostname"] = hostname
    out.update(extra)
    return {key: value for key, value in out.items() if value is not None}


def sample_series(values: dict[str, float], ts: int, **label_args) -> list:
    """One GPU's samples at one timestamp: {series name: value}."""
    return [(labels(name, **label_args), [(ts, value)]) for name, value in values.items()]


def body(series: list) -> bytes:
    return snappy_compress(write_request_encode(series))


def post(client: Client, token: str | None, data: bytes, **headers):
    headers = {"Content-Encoding": "snappy", **headers}
    if token is not None:
        headers.setdefault("Authorization", f"Bearer {token}")
    return client.post(
        "/api/v1/prometheus/write", data=data, content_type="application/x-protobuf",
        headers={**headers, "X-Prometheus-Remote-Write-Version": "0.1.0"},
    )  # fmt: skip


FULL = {
    "DCGM_FI_DEV_GPU_TEMP": 64, "DCGM_FI_DEV_POWER_USAGE": 412.5, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789.0,
    "DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_MEM_COPY_UTIL": 41, "DCGM_FI_DEV_FB_USED": 80211,
    "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_FAN_SPEED": 30,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 2, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 4, "DCGM_FI_DEV_XID_ERRORS": 0,
}  # fmt: skip


def pending_samples() -> dict[tuple[str, dt.datetime], dict[str, float]]:
    """The stored pending readings: (GPU uuid, time) → their samples by field."""
    return {(row.gpu.uuid, row.ts): orjson.loads(row.samples) for row in PendingReading.objects.select_related("gpu")}
