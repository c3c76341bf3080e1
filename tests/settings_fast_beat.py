"""`manage.py run` for the embedded integration tests (tests/ops/test_embedded.py): the portal's
own settings with every beat interval at 2 % (rollups every 0.6 s, the silence check every 1.2 s)."""

from portal.settings import *  # noqa: F403

for _entry in CELERY_BEAT_SCHEDULE.values():  # noqa: F405
    _entry["schedule"] *= 0.02
