"""Entry points for the workers: ids in, the service does the work (idempotent: rows are claimed)."""

from celery import shared_task

from portal.scheduler import services


@shared_task(acks_late=True, ignore_result=True)
def scheduler_host_actions_task(host_id: int) -> int:
    return services.scheduler_host_actions_run(host_id=host_id)


@shared_task(ignore_result=True)
def scheduler_sweep_task() -> int:
    return services.scheduler_sweep()
