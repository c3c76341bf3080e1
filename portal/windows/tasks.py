"""Entry points for the workers: the beat's pass over windows (idempotent: windows are claimed)."""

from celery import shared_task

from portal.windows import enqueue, services


@shared_task(ignore_result=True)
def windows_beat_task() -> int:
    hosts = services.windows_beat()
    enqueue.host_actions(hosts)
    return len(hosts)
