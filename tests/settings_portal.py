"""A portal the tests start in a subprocess (tests/portal_process.py): the portal's own settings,
with Celery tasks run where they are sent (Daphne alone, no worker) and the pipeline sent once
per batch, right away, so a test sees a batch's effects when its answer comes."""

import os

from portal.settings import *  # noqa: F403

CELERY_TASK_ALWAYS_EAGER = True
PIPELINE_DEBOUNCE_S = 0

# A test's own scrape interval for remote write (tests/remote_write/test_real_prometheus.py), not a
# setting a lab changes: the portal learns each GPU's interval from its readings.
if "TEST_REMOTE_WRITE_SCRAPE_INTERVAL_S" in os.environ:
    REMOTE_WRITE_SCRAPE_INTERVAL_S = float(os.environ["TEST_REMOTE_WRITE_SCRAPE_INTERVAL_S"])
