"""The ingest-v1 batch decoded and checked in one pass by msgspec, for the usual, valid batch.

pydantic's BatchIn (portal.telemetry.schemas) is the contract: its errors are the protocol's 400
answers. This is a faster reading of the same contract for the batches that pass it: msgspec
decodes the JSON straight into frozen structs with the same bounds, patterns and strictness
(roughly 5x less CPU per reading than BatchIn.model_validate_json). It only ever accepts a subset
of what BatchIn accepts, with the same values; anything it does not accept (any error, a zone
other than UTC, a year outside the API's range) is handed to BatchIn, which gives the exact
answer: accepted, or the protocol's 400 with its field locations and messages.
tests/telemetry/test_ingest_fast.py holds the two to that, input by input.

The host entry and the GPU inventory are small (one per batch, one per GPU) and are checked by
pydantic (HostIn, GpuIn) from their raw JSON, so their rules (blank texts as unknown, NUL refused,
the extension counters) have one implementation.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
import uuid
from typing import Annotated, Literal

import msgspec
import pydantic
import pydantic_core

from portal.fleet.identifiers import GPU_UUID_PATTERN
from portal.telemetry import metrics
from portal.telemetry.models import THROTTLE_REASONS
from portal.telemetry.schemas import (
    JOB_KEY_PATTERN,
    MAX_JOBS_PER_READING,
    MAX_READINGS_PER_BATCH,
    BatchIn,
    HostIn,
)

# Python's `$` also matches before a final newline; pydantic's (Rust) regex does not: `\Z` is the
# same end as pydantic's for the fast path.
_GPU_UUID = msgspec.Meta(min_length=5, max_length=96, pattern=GPU_UUID_PATTERN.removesuffix("$") + r"\Z")
_FINITE = sys.float_info.max  # an upper bound refuses inf (pydantic's allow_inf_nan=False)

GpuUuid = Annotated[str, _GPU_UUID]
Instant = Annotated[dt.datetime, msgspec.Meta(tz=True)]
# A job key's length is checked while decoding, its pattern once per distinct list of keys
# (_jobs_ok): a busy GPU names the same few jobs in every reading, and the pattern checked per key
# in the decoder cost 4 µs a reading with 4 keys (as much as the rest of the reading's decoding).
JobKey = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_JOB_KEY = re.compile(JOB_KEY_PATTERN.removesuffix("$") + r"\Z")
_jobs_seen: set[tuple[str, ...]] = set()  # lists of keys that passed, kept per process
JOBS_SEEN_MAX = 4096  # a hostile agent may name many: forgotten when full


class XidEvent(msgspec.Struct, frozen=True, gc=False):
    ts: Instant
    code: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


def _metric_type(metric: metrics.Metric):
    """A reading metric's msgspec type, with the bounds of schemas.ReadingIn's (the registry's)."""
    if metric.type == metrics.REASONS:
        kind = Annotated[list[Literal[THROTTLE_REASONS]], msgspec.Meta(max_length=metric.max_items)]
    elif metric.type == metrics.BOOL:
        kind = bool
    else:
        python = int if metric.type == metrics.INT else float
        upper = metric.le if metric.le is not None else (_FINITE if python is float else None)
        bounds = {key: value for key, value in (("ge", metric.ge), ("le", upper)) if value is not None}
        kind = Annotated[python, msgspec.Meta(**bounds)] if bounds else python
    return kind | None if metric.nullable else kind


# The reading as schemas.ReadingIn describes it, built from the same registry (portal/telemetry/metrics.py).
Reading = msgspec.defstruct(
    "Reading",
    [
        ("gpu_uuid", GpuUuid),
        ("ts", Instant),
        *((metric.name, _metric_type(metric)) for metric in metrics.METRICS),
        ("xid_events", Annotated[tuple[XidEvent, ...], msgspec.Meta(max_length=1000)], ()),
        ("jobs", Annotated[tuple[JobKey, ...], msgspec.Meta(max_length=MAX_JOBS_PER_READING)] | None, None),
    ],
    module=__name__,
    frozen=True,
    gc=False,
)


class _Batch(msgspec.Struct, frozen=True, gc=False):
    batch_id: uuid.UUID
    sent_at: Instant
    host: msgspec.Raw
    readings: Annotated[list[Reading], msgspec.Meta(max_length=MAX_READINGS_PER_BATCH)]
    gpus: msgspec.Raw = msgspec.Raw()  # checked by pydantic (GpuIn), like the host; empty: not sent


_decoder = msgspec.json.Decoder(_Batch)
_gpus = pydantic.TypeAdapter(BatchIn.model_fields["gpus"].rebuild_annotation())
_UTC = dt.UTC


def _instant_ok(moment: dt.datetime) -> bool:
    # What sane_instant would leave unchanged: UTC already, a year from 1970 to 9000.
    return moment.tzinfo is _UTC and 1970 <= moment.year <= 9000


# Where the two parsers read the same bytes differently, BatchIn decides:
# - a time with more than 6 fractional digits: msgspec rounds to the microsecond, pydantic truncates
#   (the first, cheap search finds the digits; the second, only then, whether they follow a time);
# - a \u escape (a non-ASCII or hidden character in a string, or a lone surrogate);
# - bytes that are not UTF-8 (msgspec skips unknown fields without checking them).
_SEVEN_DIGITS = re.compile(rb"\.[0-9]{7}")
_SUB_MICROSECOND_TIME = re.compile(rb"[0-9]:[0-9][0-9]\.[0-9]{7}")


def _plain_bytes(body: bytes) -> bool:
    if b"\\u" in body:
        return False
    if _SEVEN_DIGITS.search(body) and _SUB_MICROSECOND_TIME.search(body):
        return False
    if not body.isascii():
        try:
            body.decode()
        except UnicodeDecodeError:
            return False
    return True


def _jobs_ok(jobs: tuple[str, ...]) -> bool:
    if not all(_JOB_KEY.match(key) for key in jobs):
        return False
    if len(_jobs_seen) >= JOBS_SEEN_MAX:
        _jobs_seen.clear()
    _jobs_seen.add(jobs)
    return True


def _fast(body: bytes) -> BatchIn | None:
    if not _plain_bytes(body):
        return None
    try:
        batch = _decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if not _instant_ok(batch.sent_at):
        return None
    for reading in batch.readings:
        if not _instant_ok(reading.ts):
            return None
        if reading.jobs and reading.jobs not in _jobs_seen and not _jobs_ok(reading.jobs):
            return None
        for event in reading.xid_events:
            if not _instant_ok(event.ts):
                return None
    try:
        host = HostIn.model_validate_json(bytes(batch.host))
        gpus = _gpus.validate_json(bytes(batch.gpus)) if len(batch.gpus) else ()
    except pydantic_core.ValidationError:
        return None
    # Not validated again: every field was checked above, to BatchIn's rules.
    return BatchIn.model_construct(
        batch_id=batch.batch_id, sent_at=batch.sent_at, host=host, gpus=gpus, readings=batch.readings
    )


def batch_parse(body: bytes) -> BatchIn:
    """The batch in `body` (JSON bytes), as BatchIn.model_validate_json gives it, whose
    ValidationError it raises for a batch it refuses; its readings are `Reading` structs (same
    attributes as schemas.ReadingIn)."""
    return _fast(body) or BatchIn.model_validate_json(body)


def decode_only(body: bytes):
    """The JSON alone, into plain values (bench/ingest_cpu.py's reference for decoding)."""
    return msgspec.json.decode(body)


# The host entry and inventory a producer inside the portal sends with every batch repeat from
# batch to batch: each distinct one checked once (pydantic), kept per process.
_hosts_checked: dict[tuple, HostIn] = {}
_inventories_checked: dict[tuple, tuple] = {}
CHECKED_KEPT_MAX = 1024


def _checked(kept: dict, key: tuple, check):
    answer = kept.get(key)
    if answer is None:
        answer = check()
        if len(kept) >= CHECKED_KEPT_MAX:
            kept.clear()
        kept[key] = answer
    return answer


def batch_of_readings(*, batch_id: uuid.UUID, sent_at: dt.datetime, host: dict, gpus: list[dict],
                      readings: list) -> BatchIn:  # fmt: skip
    """A batch whose readings a producer inside the portal built itself as `Reading` structs (remote
    write), every value already held to the reading's rules as it made them (the field's own
    bounds and type, a UUID by its pattern, a time inside the acceptance window, job keys by their
    pattern): the readings are not checked again, the host entry and inventory are, by pydantic
    as batch_parse checks them (ValidationError), without writing each reading as JSON only for
    msgspec to read it back."""
    if len(readings) > MAX_READINGS_PER_BATCH:  # BatchIn's own error for it
        return BatchIn.model_validate({"batch_id": batch_id, "sent_at": sent_at, "host": host, "gpus": gpus,
                                       "readings": msgspec.to_builtins(readings)})  # fmt: skip
    host_key = tuple(host.items())
    gpus_key = tuple(tuple(gpu.items()) for gpu in gpus)
    return BatchIn.model_construct(
        batch_id=batch_id, sent_at=sent_at,
        host=_checked(_hosts_checked, host_key, lambda: HostIn.model_validate(host)),
        gpus=_checked(_inventories_checked, gpus_key, lambda: _gpus.validate_python(gpus)),
        readings=readings,
    )  # fmt: skip
