"""The benches' portal: the portal's own settings, with ingest's per-host rate limit lifted (a
bench's clients post as fast as they are answered, or as fast as the bench paces them)."""

from portal.settings import *  # noqa: F403

INGEST_RATE_PER_S = 1_000_000.0
INGEST_RATE_BURST = 1_000_000
