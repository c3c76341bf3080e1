"""What stands between a stored batch and its effects (portal-api-v1.md, "Pipeline status").

The stages that work on stored batches register here: telemetry's own rollups, and the apps above
telemetry (rules, wear) in their `AppConfig.ready()`, as for telemetry's batch hooks. Each stage
gives one function, `backlog(now=...)`, that says how many stored batches it has not finished and
when the oldest of them was stored, read from that stage's own progress marker. The API, the
metrics and the fleet page read `pipeline_status()` only, so a single ledger of finished batches
can later answer for every stage without them changing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Count, Min, QuerySet
from django.utils import timezone

from portal.telemetry.models import IngestBatch


@dataclass(frozen=True)
class Backlog:
    batches: int = 0
    oldest_stored_at: dt.datetime | None = None  # the oldest pending batch's received_at


@dataclass(frozen=True)
class StageStatus:
    name: str
    backlog_batches: int
    oldest_pending_at: dt.datetime | None
    lag_seconds: float | None


BacklogFunction = Callable[..., Backlog]
_stages: dict[str, BacklogFunction] = {}


def pipeline_stage(name: str) -> Callable[[BacklogFunction], BacklogFunction]:
    """Register a stage: `backlog(now=...)` returns its Backlog. A second registration under the
    same name replaces the first."""

    def register(backlog: BacklogFunction) -> BacklogFunction:
        _stages[name] = backlog
        return backlog

    return register


def backlog_of(batches: QuerySet[IngestBatch]) -> Backlog:
    """The Backlog of a query of pending batches (one query)."""
    figures = batches.aggregate(batches=Count("id"), oldest=Min("received_at"))
    return Backlog(batches=figures["batches"], oldest_stored_at=figures["oldest"])


def pipeline_status(*, now: dt.datetime | None = None) -> list[StageStatus]:
    """Every registered stage, by name: one query each."""
    now = now or timezone.now()
    out = []
    for name in sorted(_stages):
        backlog = _stages[name](now=now)
        oldest = backlog.oldest_stored_at if backlog.batches else None
        lag = max(0.0, (now - oldest).total_seconds()) if oldest is not None else None
        out.append(StageStatus(name=name, backlog_batches=backlog.batches, oldest_pending_at=oldest, lag_seconds=lag))
    return out


LAGGING_AFTER_S = 60.0  # the fleet page tells an admin from here on


def pipeline_lagging(*, now: dt.datetime | None = None) -> list[StageStatus]:
    """The stages whose oldest pending batch was stored more than LAGGING_AFTER_S ago."""
    return [stage for stage in pipeline_status(now=now) if (stage.lag_seconds or 0) > LAGGING_AFTER_S]


@pipeline_stage("rollups")
def _rollups_backlog(*, now: dt.datetime) -> Backlog:
    # rolled_up is set in the transaction that writes the batch's rollups (services.rollups).
    return backlog_of(IngestBatch.objects.filter(rolled_up=False))
