"""A portal the tests start in a subprocess (tests/portal_process.py): the portal's own settings,
with Celery tasks run where they are sent (Daphne alone, no worker) and the pipeline sent once
per batch, right away, so a test sees a batch's effects when its answer comes."""

from portal.settings import *  # noqa: F403

CELERY_TASK_ALWAYS_EAGER = True
PIPELINE_DEBOUNCE_S = 0
