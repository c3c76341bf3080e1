"""The pipeline as tests drive it: run it and say what one stage did, or what waits for it."""

import uuid

from django.utils import timezone

from portal.telemetry.models import IngestBatch
from portal.telemetry.pipeline import pipeline_run, pipeline_status


def stage_run(stage: str, *, limit: int | None = None) -> int:
    """Run the pipeline until nothing waits (in passes of at most `limit` batches): the number of
    batches `stage` finished."""
    result = pipeline_run(limit=limit) if limit else pipeline_run()
    return result.finished.get(stage, 0)


def stage_waiting(stage: str) -> int:
    """Stored batches `stage` has not finished."""
    return next(status.backlog_batches for status in pipeline_status() if status.name == stage)


def rollups_process_pending(*, limit: int | None = None) -> int:
    return stage_run("rollups", limit=limit)


def batches_recorded(readings) -> list[IngestBatch]:
    """Readings a test wrote straight to the store, recorded as ingest records batches (one per
    host, spanning its readings), so that the pipeline works on them as on ingested ones."""
    by_host: dict[int, list] = {}
    for reading in readings:
        by_host.setdefault(reading.gpu.host_id, []).append(reading.ts)
    now = timezone.now()
    return [
        IngestBatch.objects.create(
            batch_id=uuid.uuid4(),
            host_id=host_id,
            sent_at=now,
            received_at=now,
            reading_count=len(stamps),
            first_ts=min(stamps),
            last_ts=max(stamps),
        )  # fmt: skip
        for host_id, stamps in by_host.items()
    ]
