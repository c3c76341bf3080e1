"""Counting stored readings into the wear meters the way the pipeline does, for tests that store
readings themselves: a block of them read as a pass reads its batches (telemetry.pipeline.block_read:
a batch's readings are its host's readings within its time span), handed to the wear stage
(services.wear_prepare), and what it prepared applied in a transaction after checking that nothing
moved meanwhile (else prepared again inside it), as `_one_pass` does."""

import datetime as dt

from django.db import transaction
from django.utils import timezone

from portal.fleet.models import Gpu
from portal.telemetry.pipeline import Block, StoredBatch, block_read
from portal.wear.services import wear_prepare

EARLIEST = dt.datetime(1970, 1, 2, tzinfo=dt.UTC)
LATEST = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)


def _utc(seconds: float | None, default: dt.datetime) -> dt.datetime:
    return default if seconds is None else dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def wear_block(ranges: dict[int, tuple[float | None, float | None]]) -> Block:
    """The block of a batch per GPU of `ranges` ({gpu_id: (first, last) epoch s, both included;
    None: every stored reading that way}), holding those GPUs' readings only."""
    hosts = dict(Gpu.objects.filter(pk__in=list(ranges)).values_list("pk", "host_id"))
    batches = [
        StoredBatch(pk=0, host_id=hosts[gpu_id], received_at=timezone.now(), first_ts=_utc(first, EARLIEST),
                    last_ts=_utc(last, LATEST), reading_count=0)
        for gpu_id, (first, last) in ranges.items()
    ]  # fmt: skip
    block = block_read(batches)
    readings = {gpu_id: rows for gpu_id, rows in block.readings.items() if gpu_id in ranges}
    return Block(block.batches, readings, block.xids, block.gpu_hosts)


def wear_stage_run(block: Block) -> None:
    prepared = wear_prepare(block)
    with transaction.atomic():
        if not prepared.current():
            prepared = wear_prepare(block)
        prepared.apply()


def wear_count(ranges: dict[int, tuple[float | None, float | None]]) -> None:
    """Count the stored readings of each GPU of `ranges` in its span as the wear stage does."""
    wear_stage_run(wear_block(ranges))
