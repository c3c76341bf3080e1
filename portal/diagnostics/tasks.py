"""Entry points for the workers (idempotent: each expiry is a conditional UPDATE)."""

from celery import shared_task

from portal.diagnostics import services


@shared_task(ignore_result=True)
def diagnostics_expire_task() -> int:
    return services.diagnostics_expire()
