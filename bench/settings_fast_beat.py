"""bench/settings.py with beat's schedule 10 times faster (rollups every 3 s, the batch sweep every
3 s): a bench or soak of minutes sees what hours of the default schedule would."""

from bench.settings import *  # noqa: F403

for _entry in CELERY_BEAT_SCHEDULE.values():  # noqa: F405
    _entry["schedule"] *= 0.1
