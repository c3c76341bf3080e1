"""The benches' portal: the portal's own settings, with ingest's per-host and remote write's
per-source rate limits lifted (a bench's clients post as fast as they are answered, or as fast as
the bench paces them)."""

from portal.settings import *  # noqa: F403

INGEST_RATE_PER_S = 1_000_000.0
INGEST_RATE_BURST = 1_000_000
REMOTE_WRITE_RATE_PER_S = 1_000_000.0  # remote write's per-source limit, lifted the same way
REMOTE_WRITE_RATE_BURST = 1_000_000
