"""The jobs tests post batches the way the agent does: the ingest tests' per-test settings."""

from tests.telemetry.conftest import _ingest_settings  # noqa: F401 - an autouse fixture, shared
