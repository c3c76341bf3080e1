"""Celery tasks: thin interfaces that pass ids, call a service, and are idempotent."""

from celery import shared_task

from portal.maintenance.services import beat
from portal.maintenance.services.notify import notification_send, notifications_pending_sweep, retry_delay_s


@shared_task(acks_late=True, ignore_result=True)
def agent_silent_check_task():
    beat.agent_silent_check()


@shared_task(acks_late=True, ignore_result=True)
def schedules_check_task():
    beat.schedules_check()


@shared_task(acks_late=True, ignore_result=True)
def xid_quiet_check_task():
    beat.xid_quiet_check()


@shared_task(ignore_result=True)
def notification_send_task(notification_id: int):
    retry = notification_send(notification_id=notification_id)
    if retry is not None:
        notification_send_task.apply_async((retry.pk,), countdown=retry_delay_s(retry.attempt))


@shared_task(ignore_result=True)
def notifications_pending_sweep_task():
    # Attempts whose enqueue failed (broker down) are still pending rows: queue them again.
    notifications_pending_sweep()
