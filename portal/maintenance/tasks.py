"""Celery tasks: thin interfaces that pass ids, call a service, and are idempotent."""

from celery import shared_task

from portal.maintenance.services import beat
from portal.maintenance.services.evaluate import batch_evaluate, batches_sweep
from portal.maintenance.services.notify import notification_send, notifications_pending_sweep, retry_delay_s


@shared_task(acks_late=True, ignore_result=True)
def batch_evaluate_task(batch_pk: int, gpu_ids: list[int] | None = None):
    # Idempotent (a BatchEvaluation row claims the batch), so acks_late is safe.
    batch_evaluate(batch_pk=batch_pk, gpu_ids=gpu_ids)


@shared_task(acks_late=True, ignore_result=True)
def batches_sweep_task():
    # Batches that no evaluation task reached (broker down at ingest); idempotent like the above.
    batches_sweep()


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
