from celery import shared_task

from portal.telemetry.pipeline import pipeline_run, pipeline_sweep
from portal.telemetry.services.retention import telemetry_housekeeping


@shared_task(acks_late=True, ignore_result=True)
def pipeline_run_task():
    # Safe to run twice: the ledger says what each stage has finished (acks_late: a crash reruns).
    pipeline_run()


@shared_task(acks_late=True, ignore_result=True)
def pipeline_sweep_task():
    pipeline_sweep()


@shared_task(acks_late=True, ignore_result=True)
def telemetry_prune_task():
    telemetry_housekeeping()
