from celery import shared_task

from portal.telemetry.services.retention import telemetry_prune
from portal.telemetry.services.rollups import rollups_process_pending


@shared_task(acks_late=True, ignore_result=True)
def rollups_process_pending_task():
    # Idempotent (whole buckets are recomputed), so acks_late is safe: a crash means a rerun.
    while rollups_process_pending():
        pass


@shared_task(acks_late=True, ignore_result=True)
def telemetry_prune_task():
    telemetry_prune()
