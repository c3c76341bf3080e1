"""Celery tasks: thin interfaces that call a service, idempotent."""

from celery import shared_task

from portal.wear.hours import wear_hours_fold


@shared_task(acks_late=True, ignore_result=True)
def wear_hours_fold_task():
    # Safe to run twice: a day already packed is not packed again.
    wear_hours_fold()
