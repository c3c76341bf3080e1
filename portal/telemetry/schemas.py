"""The ingest-v1 wire format as pydantic models (see shared/protocol/ingest-v1.md).

Strict: a number where a string belongs (or "64" where 64 belongs) is a 400, not a guess.
Unknown fields are ignored so that a newer agent's optional additions pass (the protocol lets
the agent extend it compatibly). Every metric must be present; null means "not supported".
"""

from typing import Annotated, Literal
from uuid import UUID

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, create_model

from portal.core.api import sane_instant
from portal.fleet.identifiers import GPU_UUID_PATTERN, HOSTNAME_PATTERN
from portal.telemetry import metrics
from portal.telemetry.models import THROTTLE_REASONS

ThrottleReason = Literal[THROTTLE_REASONS]


def _no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL: refused here as a 400, not failed on in the database.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _blank_is_unknown(value: str | None) -> str | None:
    # An empty version or name is the agent saying "unknown", as null does: it never replaces a
    # known value (and never becomes a driver-update record "from 580.65 to ''").
    return None if value is None or not value.strip() else value


# Every instant of a batch: a year from 1970 to 9000, in UTC (what the API does to its times).
Instant = Annotated[AwareDatetime, AfterValidator(sane_instant)]


Text = Annotated[str, AfterValidator(_no_nul)]


def OptionalText(max_length: int):  # noqa: N802 - a type
    return Annotated[Annotated[Text, Field(max_length=max_length)] | None, AfterValidator(_blank_is_unknown)]


# Identifiers that end up in URLs (see portal/fleet/identifiers.py).
GpuUuid = Annotated[Text, Field(min_length=5, max_length=96, pattern=GPU_UUID_PATTERN)]
Hostname = Annotated[Text, Field(min_length=1, max_length=253, pattern=HOSTNAME_PATTERN)]
Celsius = Annotated[int, Field(ge=-60, le=200)]
Watts = Annotated[float, Field(ge=0, le=10_000)]
Count = Annotated[int, Field(ge=0, le=2**62)]
# A job on a GPU (ingest-v1.md, `jobs`): `slurm:<id>`, `k8s:<namespace>/<pod>` or `user:<login>`,
# 1-128 printable ASCII characters without spaces.
JOB_KEY_PATTERN = r"^(?:slurm|k8s|user):[!-~]+$"
MAX_JOBS_PER_READING = 16
JobKey = Annotated[Text, Field(min_length=1, max_length=128, pattern=JOB_KEY_PATTERN)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, frozen=True)


class XidEventIn(_Strict):
    ts: Instant
    code: Annotated[int, Field(ge=0, le=1_000_000)]


def _metric_type(metric: metrics.Metric):
    """A reading metric's pydantic type, from the registry (portal/telemetry/metrics.py)."""
    if metric.type == metrics.REASONS:
        kind = Annotated[list[ThrottleReason], Field(max_length=metric.max_items)]
    else:
        bounds = {key: value for key, value in (("ge", metric.ge), ("le", metric.le)) if value is not None}
        python = _PYTHON_TYPES[metric.type]
        kind = Annotated[python, Field(**bounds)] if bounds else python
    return kind | None if metric.nullable else kind


_PYTHON_TYPES = {metrics.INT: int, metrics.FLOAT: float, metrics.BOOL: bool}

# One GPU's reading: its GPU and time, every metric of the registry (present, null where the GPU does
# not support it), its Xid events and its jobs.
ReadingIn = create_model(
    "ReadingIn",
    __base__=_Strict,
    __module__=__name__,
    gpu_uuid=(GpuUuid, ...),
    ts=(Instant, ...),
    **{metric.name: (_metric_type(metric), ...) for metric in metrics.METRICS},
    xid_events=(Annotated[list[XidEventIn], Field(max_length=1000)], ()),
    # Absent (or null): the agent cannot tell; []: no compute process on the GPU.
    jobs=(Annotated[list[JobKey], Field(max_length=MAX_JOBS_PER_READING)] | None, None),
)


class GpuIn(_Strict):
    uuid: GpuUuid
    index: Annotated[int, Field(ge=0, le=1023)]
    name: OptionalText(128) = None
    serial: OptionalText(64) = None
    pci_bus_id: OptionalText(32) = None
    vbios_version: OptionalText(64) = None
    memory_total_mib: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    power_limit_default_w: Watts | None = None
    temp_slowdown_c: Celsius | None = None
    temp_shutdown_c: Celsius | None = None
    pcie_link_gen_max: Annotated[int, Field(ge=1, le=10)] | None = None
    pcie_link_width_max: Annotated[int, Field(ge=1, le=64)] | None = None


class HostIn(_Strict):
    hostname: Hostname
    agent_version: OptionalText(64) = None
    driver_version: OptionalText(64) = None
    cuda_driver_version: OptionalText(64) = None
    nvml_version: OptionalText(64) = None
    # Extensions: batches the agent's bounded spool had to drop, and batches the portal refused
    # with a 4xx (set aside by the agent), both running totals kept in the agent's spool.
    dropped_batches: Count = 0
    rejected_batches: Count = 0


MAX_READINGS_PER_BATCH = 5000


class BatchIn(_Strict):
    batch_id: UUID
    sent_at: Instant
    host: HostIn
    gpus: Annotated[list[GpuIn], Field(max_length=1024)] = ()
    readings: Annotated[list[ReadingIn], Field(max_length=MAX_READINGS_PER_BATCH)]


class Command(BaseModel):
    """Work the portal asks of the host (ingest-v1.md, "Commands"): today only `diagnose`."""

    id: str
    kind: str
    level: int | None = None
    gpus: list[str] = []


class IngestAccepted(BaseModel):
    accepted: int
    duplicate: bool
    commands: list[Command] | None = None


class ErrorDetail(BaseModel):
    loc: str
    msg: str


class ErrorOut(BaseModel):
    error: str
    detail: list[ErrorDetail] | None = None
