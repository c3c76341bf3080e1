from celery import shared_task
from django.conf import settings

from portal.wear.services import wear_sweep, wear_update_many


@shared_task(acks_late=True, ignore_result=True)
def wear_update_task(ranges: dict):
    # Idempotent (a rerun finds nothing newer, and a late stretch recomputes the same hours).
    wear_update_many(ranges={int(gpu_id): (float(lo), float(hi)) for gpu_id, (lo, hi) in ranges.items()})


@shared_task(acks_late=True, ignore_result=True)
def wear_sweep_task():
    if settings.WEAR_ON_INGEST:
        wear_sweep()
