"""bench/settings.py without live publishing: the page benches measure the pages alone."""

from bench.settings import *  # noqa: F403

LIVE_ENABLED = False
