"""Hand complete readings on to ingest: the samples of one GPU at one timestamp become one
ingest-v1 reading, validated and stored by the agent's own path (batch_parse and
reading_batch_ingest), so the rules, tickets, rollups, wear and live pages see it as they see an
agent's. A reading is complete when a later reading of its GPU has arrived holding every field
the GPU's readings have, or two scrape intervals after its first sample arrived; readings of a
GPU go on in time order, so no rule ever judges half a reading.
"""

import datetime as dt
import functools
import logging
import uuid as uuid_module
from collections import defaultdict
from dataclasses import dataclass

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from pydantic import ValidationError

from portal.core.errors import ApplicationError, Forbidden
from portal.core.locks import pass_lock
from portal.fleet import selectors as fleet_selectors
from portal.remote_write import mapping
from portal.remote_write.models import IngestSource, PendingSample, SourceGpu
from portal.telemetry.ingest_fast import batch_parse
from portal.telemetry.metrics import REMAPPED_ROWS_PENDING
from portal.telemetry.schemas import ReadingIn
from portal.telemetry.selectors import throttle_names
from portal.telemetry.services.ingest import reading_batch_ingest

log = logging.getLogger(__name__)

_NAMESPACE = uuid_module.UUID("6d1c0c4e-5a0f-4b7e-9a55-7265d0746577")
_METRICS = [name for name in ReadingIn.model_fields if name not in {"gpu_uuid", "ts", "xid_events", "jobs"}]
MAX_PENDING_ROWS = 500_000  # a pass reads at most this many samples; the next pass takes the rest


@dataclass
class Pending:
    """One GPU's samples at one timestamp, as stored."""

    ts: dt.datetime
    values: dict[str, float]
    jobs: str | None
    first_received: dt.datetime
    row_ids: list[int]


@functools.cache
def _pending_sql() -> str:
    table = connection.ops.quote_name(PendingSample._meta.db_table)
    return f"SELECT id, gpu_id, ts, field, value, jobs, received_at FROM {table} ORDER BY gpu_id, ts LIMIT %s"


def _instant_reader():
    """Stored times to aware datetimes, each distinct one once: a pass reads every sample's time, and
    the driver hands back a datetime (psycopg) or Django's text (sqlite3, whose parsing through the
    ORM was most of a pass's CPU)."""
    seen: dict = {}

    def instant(value) -> dt.datetime:
        moment = seen.get(value)
        if moment is None:
            moment = value if isinstance(value, dt.datetime) else parse_datetime(value)
            if timezone.is_naive(moment):
                moment = moment.replace(tzinfo=dt.UTC)  # stored in UTC (USE_TZ)
            seen[value] = moment
        return moment

    return instant


def _pending_by_gpu() -> dict[int, list[Pending]]:
    with connection.cursor() as cursor:
        cursor.execute(_pending_sql(), [MAX_PENDING_ROWS])
        rows = cursor.fetchall()
    instant = _instant_reader()
    by_gpu: dict[int, dict[dt.datetime, Pending]] = defaultdict(dict)
    for row_id, gpu_id, raw_ts, name, value, jobs, raw_received in rows:
        ts, received_at = instant(raw_ts), instant(raw_received)
        pending = by_gpu[gpu_id].get(ts)
        if pending is None:
            pending = by_gpu[gpu_id][ts] = Pending(ts, {}, jobs, received_at, [])
        pending.values[name] = value
        pending.row_ids.append(row_id)
        pending.first_received = min(pending.first_received, received_at)
        if pending.jobs is None:
            pending.jobs = jobs
    return {gpu_id: sorted(readings.values(), key=lambda p: p.ts) for gpu_id, readings in by_gpu.items()}


def _complete(gpu: SourceGpu, readings: list[Pending], now: dt.datetime) -> tuple[list[Pending], list[Pending]]:
    """(late, complete): samples for a reading handed on already, and the readings to hand on now,
    oldest first, up to the first one still waiting."""
    late = [p for p in readings if gpu.handed_until is not None and p.ts <= gpu.handed_until]
    waiting = [p for p in readings if gpu.handed_until is None or p.ts > gpu.handed_until]
    expected = set(gpu.fields.split(",")) if gpu.fields else None
    wait = dt.timedelta(seconds=2 * (gpu.interval_s or settings.REMOTE_WRITE_SCRAPE_INTERVAL_S))
    complete = []
    for position, pending in enumerate(waiting):
        later = position < len(waiting) - 1
        if now - pending.first_received >= wait or (
            later and expected is not None and expected <= pending.values.keys()
        ):
            complete.append(pending)
        else:
            break
    return late, complete


def _reading(gpu: SourceGpu, pending: Pending) -> dict:
    """The ingest-v1 reading of one GPU's samples at one timestamp (fields without a series: null);
    moves the GPU's XID and remapped-rows baselines on."""
    reading = dict.fromkeys(_METRICS)
    reading["gpu_uuid"], reading["ts"], reading["xid_events"] = gpu.uuid, pending.ts, []
    for name, value in pending.values.items():
        if name == mapping.XID_RAW:
            if gpu.xid_last is not None and value != gpu.xid_last and value != 0:
                reading["xid_events"].append({"ts": pending.ts, "code": int(value)})
            gpu.xid_last = value
        elif name == mapping.REMAPPED_RAW:
            reading[REMAPPED_ROWS_PENDING.name] = gpu.remapped_last is not None and value > gpu.remapped_last
            gpu.remapped_last = value
        elif name in mapping.BOOL_FIELDS:
            reading[name] = value != 0
        elif name in mapping.MASK_FIELDS:
            reading[name] = throttle_names(int(value))
        elif name in mapping.FLOAT_FIELDS:
            reading[name] = value
        else:
            reading[name] = round(value)
    if pending.jobs is not None:
        reading["jobs"] = orjson.loads(pending.jobs)
    return reading


def _batch_body(fed_host, gpus: list[SourceGpu], readings: list[dict], now: dt.datetime) -> bytes:
    key = ",".join(f"{reading['gpu_uuid']}@{reading['ts'].isoformat()}" for reading in readings)
    inventory = [
        {"uuid": gpu.uuid, "index": gpu.index, "name": gpu.name or None, "pci_bus_id": gpu.pci_bus_id or None}
        for gpu in gpus
        if gpu.index is not None
    ]
    return orjson.dumps(
        {
            "batch_id": str(uuid_module.uuid5(_NAMESPACE, f"{fed_host.host_id}|{key}")),
            "sent_at": now,
            "host": {"hostname": fed_host.host.hostname, "driver_version": fed_host.driver_version or None},
            "gpus": inventory,
            "readings": readings,
        },
        option=orjson.OPT_UTC_Z,
    )


@dataclass
class HandOnResult:
    readings: int = 0
    skipped: int = 0  # samples
    dropped: int = 0  # samples


def remote_readings_hand_on(*, now: dt.datetime | None = None) -> HandOnResult:
    """One pass over the stored samples (one pass at a time in the cluster)."""
    with pass_lock("remote-write-hand-on") as held:
        if not held:
            return HandOnResult()
        return _pass(now or timezone.now())


def _pass(now: dt.datetime) -> HandOnResult:
    result = HandOnResult()
    pending = _pending_by_gpu()
    if not pending:
        return result
    gpus = SourceGpu.objects.select_related("fed_host__host").in_bulk(pending.keys())
    by_host: dict[int, list[tuple[SourceGpu, list[Pending], list[Pending]]]] = defaultdict(list)
    for gpu_id, readings in pending.items():
        gpu = gpus[gpu_id]
        late, complete = _complete(gpu, readings, now)
        if late or complete:
            by_host[gpu.fed_host_id].append((gpu, late, complete))
    for work in by_host.values():
        outcome = _hand_on_host(work, now)
        result.readings += outcome.readings
        result.skipped += outcome.skipped
        result.dropped += outcome.dropped
    return result


_STATE = ("handed_until", "xid_last", "remapped_last", "fields", "interval_s")


def _hand_on_host(work, now: dt.datetime) -> HandOnResult:
    """One host's complete readings as one batch; when ingest refuses it, each GPU's on its own
    (a refused GPU's samples are counted, and never tried again)."""
    stored_state = {gpu.pk: [getattr(gpu, name) for name in _STATE] for gpu, _, _ in work}

    def attempt(part) -> HandOnResult:
        try:
            return _ingest(part, now)
        except (ApplicationError, ValidationError) as error:
            for gpu, _, _ in part:  # forming the readings moved the baselines on: back as stored
                for name, value in zip(_STATE, stored_state[gpu.pk], strict=True):
                    setattr(gpu, name, value)
            if len(part) > 1:
                raise
            log.warning("remote write: readings of GPU %s refused by ingest: %s", part[0][0].uuid, error)
            return _refused(part, forbidden=isinstance(error, Forbidden))

    try:
        return attempt(work)
    except (ApplicationError, ValidationError):
        pass
    result = HandOnResult()
    for one in work:
        outcome = attempt([one])
        result.readings += outcome.readings
        result.skipped += outcome.skipped
        result.dropped += outcome.dropped
    return result


def _ingest(work, now: dt.datetime) -> HandOnResult:
    fed_host = work[0][0].fed_host
    readings, row_ids, late_samples = [], [], 0
    for gpu, late, complete in work:
        previous_ts = gpu.handed_until
        for pending in late:
            row_ids.extend(pending.row_ids)
            late_samples += len(pending.row_ids)
        for pending in complete:
            readings.append(_reading(gpu, pending))
            row_ids.extend(pending.row_ids)
        if complete:
            newest = complete[-1]
            if previous_ts is not None and newest.ts > previous_ts:
                gpu.interval_s = (newest.ts - (complete[-2].ts if len(complete) > 1 else previous_ts)).total_seconds()
            gpu.handed_until = newest.ts
            gpu.fields = ",".join(sorted(newest.values))
    with transaction.atomic():
        if readings:
            batch = batch_parse(_batch_body(fed_host, [gpu for gpu, _, _ in work], readings, now))
            # The host read again: ingest keeps its GPU rows per process while its inventory_version holds.
            reading_batch_ingest(host=fleet_selectors.hosts().get(pk=fed_host.host_id), batch=batch, now=now)
        PendingSample.objects.filter(pk__in=row_ids).delete()
        for gpu, _, _ in work:
            SourceGpu.objects.filter(pk=gpu.pk).update(
                handed_until=gpu.handed_until, xid_last=gpu.xid_last, remapped_last=gpu.remapped_last,
                fields=gpu.fields, interval_s=gpu.interval_s,
            )  # fmt: skip
        if late_samples:
            IngestSource.objects.filter(pk=fed_host.source_id).update(
                samples_skipped=F("samples_skipped") + late_samples
            )
    return HandOnResult(readings=len(readings), skipped=late_samples)


def _refused(work, *, forbidden: bool = False) -> HandOnResult:
    """Ingest refuses these GPUs' readings: their samples are counted (dropped for a GPU of another
    host, skipped otherwise) and deleted; the GPUs' baselines move past them."""
    samples = 0
    with transaction.atomic():
        for gpu, late, complete in work:
            ids = [row for pending in (*late, *complete) for row in pending.row_ids]
            samples += len(ids)
            PendingSample.objects.filter(pk__in=ids).delete()
            if complete:
                SourceGpu.objects.filter(pk=gpu.pk).update(handed_until=complete[-1].ts)
        counter = "samples_dropped" if forbidden else "samples_skipped"
        IngestSource.objects.filter(pk=work[0][0].fed_host.source_id).update(**{counter: F(counter) + samples})
    return HandOnResult(dropped=samples) if forbidden else HandOnResult(skipped=samples)
