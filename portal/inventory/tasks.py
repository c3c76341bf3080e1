"""Inventory's beat task: pass ids (none here), call the service, idempotent."""

from celery import shared_task

from portal.inventory.services.warranties import warranties_ending_check


@shared_task(ignore_result=True)
def warranties_ending_check_task() -> list[int]:
    """Daily: the contracts entering their last 60 days get their "Warranty ending" ticket (once each)."""
    return warranties_ending_check()
