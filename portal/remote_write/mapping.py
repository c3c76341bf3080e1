"""prometheus-v1.md's mapping: which dcgm-exporter series gives which reading field, and what a
series' labels say (GPU, host, inventory, jobs). Declared once here; the write and the hand-on
read it."""

import math
import re
import struct
from dataclasses import dataclass
from functools import cache

import orjson
import pydantic

from portal.fleet.identifiers import GPU_UUID_RE, HOSTNAME_RE
from portal.remote_write.wire import WireError, labels_decode
from portal.telemetry import metrics
from portal.telemetry.schemas import JOB_KEY_PATTERN, MAX_JOBS_PER_READING, ReadingIn, XidEventIn

# Series → the field its samples are stored as. Most are ingest-v1.md's reading fields as they
# are; XID_RAW and REMAPPED_RAW are counters whose change over the previous reading gives the
# field (xid_events, the registry's REMAPPED_ROWS_PENDING), worked out when the reading is handed on.
XID_RAW, REMAPPED_RAW = "xid_raw", "remapped_raw"
SERIES_FIELDS = {
    **{series: metric.name for metric in metrics.METRICS for series in metric.dcgm},  # the registry's
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": REMAPPED_RAW,
    "DCGM_FI_DEV_XID_ERRORS": XID_RAW,
}
_MAPPED = [metrics.BY_NAME[field] for field in SERIES_FIELDS.values() if field in metrics.BY_NAME]
FLOAT_FIELDS = {metric.name for metric in _MAPPED if metric.type == metrics.FLOAT}
BOOL_FIELDS = {metric.name for metric in _MAPPED if metric.type == metrics.BOOL}  # a value other than 0 is true
# NVML's bit mask, stored as the integer, named when handed on.
MASK_FIELDS = {metric.name for metric in _MAPPED if metric.type == metrics.REASONS}
_MAX_MASK = 1 << 31
_MAX_XID = next(bound.le for bound in XidEventIn.model_fields["code"].metadata if hasattr(bound, "le"))

# Prometheus's staleness marker: a NaN with this exact bit pattern (ignored, not counted).
STALE_NAN_BITS = 0x7FF0000000000002
_bits = struct.Struct("<d")


def is_stale_marker(value: float) -> bool:
    return value != value and int.from_bytes(_bits.pack(value), "little") == STALE_NAN_BITS


@dataclass(frozen=True, slots=True)
class SeriesIdentity:
    field: str
    uuid: str
    hostname: str
    index: int | None
    name: str
    pci_bus_id: str
    driver_version: str
    jobs: tuple[str, ...] | None  # None: the series carries no job labels
    jobs_json: str | None  # the same as stored with a pending reading (a JSON list)


# Why a series is skipped (its samples counted as skipped).
UNKNOWN_SERIES, NO_UUID, BAD_LABELS = "unknown series", "no UUID", "labels break the identifiers' rules"

_JOB_KEY_RE = re.compile(JOB_KEY_PATTERN)


def _hostname(labels: dict[str, str]) -> str:
    hostname = labels.get("Hostname", "")
    if hostname:
        return hostname
    instance = labels.get("instance", "")
    if instance.startswith("["):  # [v6 address]:port
        return instance[1:].partition("]")[0]
    return instance.rpartition(":")[0] if instance.count(":") == 1 else instance


def _jobs(labels: dict[str, str]) -> tuple[str, ...] | None:
    if not {"pod", "namespace", "hpc_job"} & labels.keys():
        return None
    jobs = []
    if labels.get("pod") and labels.get("namespace"):
        jobs.append(f"k8s:{labels['namespace']}/{labels['pod']}")
    jobs.extend(f"slurm:{job.strip()}" for job in labels.get("hpc_job", "").split(",") if job.strip())
    return tuple(jobs)


def _jobs_ok(jobs: tuple[str, ...]) -> bool:
    return len(jobs) <= MAX_JOBS_PER_READING and all(len(job) <= 128 and _JOB_KEY_RE.match(job) for job in jobs)


def series_identity(labels: dict[str, str]) -> SeriesIdentity | str:
    """What a series' labels say, or why its samples are skipped."""
    field = SERIES_FIELDS.get(labels.get("__name__", ""))
    if field is None:
        return UNKNOWN_SERIES
    uuid = labels.get("UUID", "")
    if not uuid:
        return NO_UUID
    hostname = _hostname(labels)
    index = labels.get("gpu", "")
    jobs = _jobs(labels)
    if (
        not GPU_UUID_RE.match(uuid) or len(uuid) > 96 or not HOSTNAME_RE.match(hostname) or len(hostname) > 253
        or (index and (not index.isdigit() or int(index) > 1023))
        or (jobs and not _jobs_ok(jobs))
        or any("\x00" in value for value in labels.values())
    ):  # fmt: skip
        return BAD_LABELS
    return SeriesIdentity(
        field=field, uuid=uuid, hostname=hostname, index=int(index) if index else None,
        name=labels.get("modelName", "")[:128], pci_bus_id=labels.get("pci_bus_id", "")[:32],
        driver_version=labels.get("DCGM_FI_DRIVER_VERSION", "")[:64], jobs=jobs,
        jobs_json=None if jobs is None else orjson.dumps(jobs).decode(),
    )  # fmt: skip


# Labels as sent → their identity, kept per process: Prometheus sends the same series every
# scrape. Bounded: a source that sends ever new series only costs decoding again.
_identities: dict[bytes, SeriesIdentity | str] = {}
MAX_KEPT_IDENTITIES = 200_000


def identity_of(raw_labels: bytes) -> SeriesIdentity | str:
    identity = _identities.get(raw_labels)
    if identity is None:
        identity = series_identity(labels_decode(raw_labels))  # WireError for what is not labels
        if len(_identities) >= MAX_KEPT_IDENTITIES:
            _identities.clear()
        _identities[raw_labels] = identity
    return identity


@cache
def _field_adapter(field: str) -> pydantic.TypeAdapter:
    annotation = ReadingIn.model_fields[field].annotation if field in ReadingIn.model_fields else None
    return pydantic.TypeAdapter(annotation, config=pydantic.ConfigDict(strict=True, allow_inf_nan=False))


# field → value → value_usable's answer, kept per process (a GPU's values repeat: temperatures,
# clocks, counters that stay at 0). Per field, so that a series' values are looked up together
# (usable_kept); a counter that always moves (energy) only fills its own field's, up to the bound.
_usable: dict[str, dict[float, float | None]] = {}
MAX_KEPT_VALUES = 4096  # per field


def usable_kept(field: str) -> dict[float, float | None]:
    """The answers value_usable keeps for this field, by value (a value not in it: ask value_usable)."""
    kept = _usable.get(field)
    if kept is None:
        kept = _usable[field] = {}
    return kept


def value_usable(field: str, value: float) -> float | None:
    """The sample's value as stored (a float), or None when a reading cannot use it: checked by the
    reading field's own rules (ingest-v1.md's ranges), so that no stored sample fails its reading."""
    kept = usable_kept(field)
    if value in kept:
        return kept[value]
    answer = _value_usable(field, value)
    if value == value:  # NaN never equals itself: not worth keeping
        if len(kept) >= MAX_KEPT_VALUES:
            kept.clear()
        kept[value] = answer
    return answer


def _value_usable(field: str, value: float) -> float | None:
    if not math.isfinite(value):
        return None
    if field in BOOL_FIELDS:
        return value
    if field in MASK_FIELDS or field == REMAPPED_RAW:
        return value if value == int(value) and 0 <= value < _MAX_MASK else None
    if field == XID_RAW:  # an XID code, as ingest-v1.md bounds it
        return value if value == int(value) and 0 <= value <= _MAX_XID else None
    converted = value if field in FLOAT_FIELDS else round(value)
    try:
        _field_adapter(field).validate_python(converted)
    except pydantic.ValidationError:
        return None
    return value


__all__ = ["WireError", "identity_of", "value_usable"]
