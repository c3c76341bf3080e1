"""The pipeline as tests drive it: run it and say what one stage did, or what waits for it."""

from portal.telemetry.pipeline import pipeline_pass, pipeline_run, pipeline_status


def stage_run(stage: str, *, limit: int | None = None) -> int:
    """Run the pipeline (one pass of at most `limit` batches, or until nothing waits): the number
    of batches `stage` finished."""
    result = pipeline_pass(limit=limit) if limit else pipeline_run()
    return result.finished.get(stage, 0)


def stage_waiting(stage: str) -> int:
    """Stored batches `stage` has not finished."""
    return next(status.backlog_batches for status in pipeline_status() if status.name == stage)


def rollups_process_pending(*, limit: int | None = None) -> int:
    return stage_run("rollups", limit=limit)
