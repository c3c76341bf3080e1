"""The benches' settings, and the bench-only app that takes the wear stage out of the pipeline."""

from bench.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "bench.wear_off"]  # noqa: F405 (last: its ready() runs after wear's)
