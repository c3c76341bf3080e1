"""The windows app's one way to send work to the workers (services never do): the drains and
resumes a window wrote go to the scheduler's task once their transaction commits."""

from __future__ import annotations

from portal.scheduler import enqueue as scheduler_enqueue
from portal.windows import services


def host_actions(host_ids: list[int]) -> None:
    for host_id in dict.fromkeys(host_ids):
        scheduler_enqueue.host_actions_enqueue(host_id)


def run_completed(*, run) -> None:
    """The checklists hook (subscribed in WindowsConfig.ready): the last run signed off completes
    its window."""
    ended = services.window_run_completed(run=run)
    if ended is not None:
        window, hosts = ended
        host_actions(hosts)
        services.window_slurm_sync(window_id=window.pk)
