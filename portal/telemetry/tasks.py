from celery import shared_task

from portal.telemetry.pipeline import pipeline_run, pipeline_sweep
from portal.telemetry.services.compression import readings_compress
from portal.telemetry.services.partitions import reading_partitions_compact, reading_partitions_ensure
from portal.telemetry.services.retention import telemetry_prune
from portal.telemetry.services.rollup_chunks import rollups_compress


@shared_task(acks_late=True, ignore_result=True)
def pipeline_run_task():
    # Safe to run twice: the ledger says what each stage has finished (acks_late: a crash reruns).
    pipeline_run()


@shared_task(acks_late=True, ignore_result=True)
def pipeline_sweep_task():
    pipeline_sweep()


@shared_task(acks_late=True, ignore_result=True)
def telemetry_prune_task():
    # PostgreSQL: the readings' day partitions, DAYS_AHEAD days ahead, before anything is pruned.
    reading_partitions_ensure()
    telemetry_prune()
    readings_compress()  # PostgreSQL: readings past READINGS_COMPRESS_AFTER_HOURS, a row per GPU-hour
    rollups_compress()  # PostgreSQL: the rollups of the days before that, a row per GPU and day
    reading_partitions_compact()  # the day just over: its key index rebuilt full
