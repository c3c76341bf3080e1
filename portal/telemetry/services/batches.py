"""Batch rows after the pipeline: folded into compact idempotency keys.

An accepted batch keeps its IngestBatch row while the pipeline needs it (its stages' work queue)
and for FOLD_AFTER after it arrived (a batch sent again at once, its answer lost, meets the
unique index). Then an 8-byte digest of its id joins its host's BatchSeen row for the hour of
its first reading, and the row goes: 8 bytes a batch instead of a row and four index entries
(about 190), a byte a reading at the agent's default of a batch per collection of 8 GPUs. A batch
sent again later is found there (`batch_seen`).

Keys are filed by the first reading's hour, not by `sent_at`: an agent stamps `sent_at` afresh at
every attempt, while a batch's readings never change. A batch without readings is not keyed: sent
again, it stores nothing either. BatchSeen rows go once ingest would refuse their batches' readings
as too old anyway (INGEST_MAX_AGE_HOURS), so no key is kept longer than it can answer anything.

A digest of 64 bits in a row of at most a few thousand: the chance that a new batch is taken for
one already seen is below 1e-15 per late batch.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections import defaultdict

from django.conf import settings
from django.db import transaction

from portal.telemetry.ledger import finished_batches
from portal.telemetry.models import BatchSeen, IngestBatch

FOLD_AFTER = dt.timedelta(hours=1)
# A batch whose first reading is older than this may have been folded: ingest looks it up in
# BatchSeen. Less than FOLD_AFTER by more than the clock skew ingest allows (readings up to 5 min
# ahead), so no folded batch slips by.
CHECK_AFTER = dt.timedelta(minutes=30)
KEY_BYTES = 8


def hour_of(instant: dt.datetime) -> dt.datetime:
    return instant.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def batch_key(batch_id: uuid.UUID) -> bytes:
    """The batch id's digest as BatchSeen keeps it (a digest rather than the id's first bytes:
    any UUID an agent sends, random or not, spreads over all 64 bits)."""
    return hashlib.blake2b(batch_id.bytes, digest_size=KEY_BYTES).digest()


def _keys(blob: bytes | memoryview) -> set[bytes]:
    blob = bytes(blob)
    return {blob[at : at + KEY_BYTES] for at in range(0, len(blob), KEY_BYTES)}


def batch_seen(*, host_id: int, batch_id: uuid.UUID, first_ts: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether this batch, whose earliest reading is at `first_ts`, was accepted and folded already
    (only a batch with a reading over CHECK_AFTER old can have been: a newer one, or one without
    readings, costs no query)."""
    if first_ts is None or first_ts >= now - CHECK_AFTER:
        return False
    blob = BatchSeen.objects.filter(host_id=host_id, hour=hour_of(first_ts)).values_list("ids", flat=True).first()
    return blob is not None and batch_key(batch_id) in _keys(blob)


def batches_fold(*, now: dt.datetime, chunk: int = 20_000, max_chunks: int = 50) -> int:
    """Fold finished batch rows that arrived before now - FOLD_AFTER into BatchSeen, each chunk in
    one transaction (keys added and rows deleted together). Returns the rows folded."""
    folded = 0
    for _ in range(max_chunks):
        rows = list(
            finished_batches()
            .filter(received_at__lt=now - FOLD_AFTER)
            .order_by("pk")
            .values_list("pk", "host_id", "first_ts", "batch_id")[:chunk]
        )
        if not rows:
            break
        keys: dict[tuple[int, dt.datetime], list[bytes]] = defaultdict(list)
        for _pk, host_id, first_ts, batch_id in rows:
            if first_ts is not None:
                keys[(host_id, hour_of(first_ts))].append(batch_key(batch_id))
        with transaction.atomic():
            _keys_add(keys)
            IngestBatch.objects.filter(pk__in=[row[0] for row in rows]).delete()
        folded += len(rows)
        if len(rows) < chunk:
            break
    return folded


def _keys_add(keys: dict[tuple[int, dt.datetime], list[bytes]]) -> None:
    hosts, hours = {host_id for host_id, _ in keys}, {hour for _, hour in keys}
    candidates = BatchSeen.objects.select_for_update().filter(host_id__in=hosts, hour__in=hours)
    existing = {(row.host_id, row.hour): row for row in candidates if (row.host_id, row.hour) in keys}
    new = []
    for key, ids in keys.items():
        row = existing.get(key)
        if row is None:
            new.append(BatchSeen(host_id=key[0], hour=key[1], ids=b"".join(ids)))
            continue
        known = _keys(row.ids)
        row.ids = bytes(row.ids) + b"".join(key for key in ids if key not in known)
    BatchSeen.objects.bulk_update(existing.values(), ["ids"], batch_size=500)
    BatchSeen.objects.bulk_create(new, batch_size=500)


def batch_keys_prune(*, now: dt.datetime) -> int:
    """Drop the keys of hours whose batches' readings ingest refuses as too old anyway (an hour's
    margin)."""
    before = hour_of(now - dt.timedelta(hours=settings.INGEST_MAX_AGE_HOURS + 1))
    return BatchSeen.objects.filter(hour__lt=before).delete()[0]
