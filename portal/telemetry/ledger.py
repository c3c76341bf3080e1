"""The pipeline's ledger, read: which stored batches every stage has finished, and the oldest
reading a stage still needs. Compression and retention keep raw readings from that moment on
and the batch keys fold only finished batches; the passes themselves are in pipeline.py (which
reads readings through the store, which compresses: this module stays off that path).

A batch is finished by a stage when the stage's `StageDone` row exists, or when it lies below the
cursor (`PipelineCursor`, where beat's sweep folds the rows).
"""

from __future__ import annotations

import datetime as dt

from django.db.models import Exists, Min, OuterRef, Q, QuerySet

from portal.telemetry import hooks
from portal.telemetry.models import IngestBatch, PipelineCursor, StageDone


def stage_names() -> list[str]:
    return [entry.name for entry in hooks.pipeline_stages]


def cursor() -> int:
    row = PipelineCursor.objects.order_by("pk").values_list("done_below", flat=True).first()
    return row or 0


def not_done(stage: str):
    return ~Exists(StageDone.objects.filter(batch_pk=OuterRef("pk"), stage=stage))


def pending_query(names: list[str], *, floor: int) -> QuerySet[IngestBatch]:
    condition = Q()
    for name in names:
        condition |= Q(not_done(name))
    return IngestBatch.objects.filter(condition, pk__gte=floor)


def finished_batches() -> QuerySet[IngestBatch]:
    """The stored batches every stage has finished."""
    names = stage_names()
    if not names:
        return IngestBatch.objects.all()
    floor = cursor()
    return IngestBatch.objects.filter(Q(pk__lt=floor) | ~Q(pk__in=pending_query(names, floor=floor).values("pk")))


def oldest_pending_reading() -> dt.datetime | None:
    """The oldest reading of a batch some stage has not finished (compression and retention keep
    readings raw from here on), or None."""
    names = stage_names()
    if not names:
        return None
    return pending_query(names, floor=cursor()).aggregate(oldest=Min("first_ts"))["oldest"]
