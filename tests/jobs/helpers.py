"""Readings that name jobs, stored the way ingest stores them, and the spans they make."""

import datetime as dt
import json

from portal.jobs.models import JobSpan
from portal.telemetry.pipeline import pipeline_run
from portal.telemetry.schemas import BatchIn
from portal.telemetry.services.ingest import reading_batch_ingest
from portal.telemetry.services.tokens import host_token_issue
from tests.telemetry.batches import gpu_uuid, make_batch, make_gpu, make_reading

STEP = dt.timedelta(seconds=30)


def host_for(hostname: str):
    return host_token_issue(hostname=hostname, label="t", create_host=True).record.host


def reading(uuid: str, ts: dt.datetime, jobs, n: int = 0, **overrides) -> dict:
    """A reading with figures that change with n (so sums and maxima are tested)."""
    values = {
        "utilization_gpu_pct": 50 + n % 50,
        "memory_used_mib": 1000 + n,
        "temperature_c": 40 + n % 30,
        "energy_mj": 1_000_000.0 + 45_000.0 * n,
        "throttle_reasons": ["hw_thermal"] if n % 7 == 0 else ["sw_power_cap"],
        **overrides,
    }
    out = make_reading(uuid, ts, **values)
    if jobs is not None:
        out["jobs"] = jobs
    return out


def store(host, readings: list[dict], *, now: dt.datetime, gpus: int = 1) -> None:
    """One batch of these readings (any order) from the host, stored as ingest stores it."""
    batch = make_batch(host.hostname, readings=0, now=now)
    batch["gpus"] = [make_gpu(gpu_uuid(100 * host.pk + g), index=g) for g in range(gpus)]
    batch["readings"] = readings
    reading_batch_ingest(host=host, batch=BatchIn.model_validate_json(json.dumps(batch)), now=now)


def run() -> None:
    result = pipeline_run()
    assert not result.failed, result.failed


SPAN_VIEW = (
    "job__key", "gpu__uuid", "started_at", "ended_at", "readings", "utilization_sum", "utilization_count",
    "memory_used_max_mib", "temperature_max_c", "throttled_count", "energy_mj", "energy_last_mj",
)  # fmt: skip


def spans() -> list[tuple]:
    return sorted(JobSpan.objects.values_list(*SPAN_VIEW))
