from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _partitions_ensure(using, **kwargs):
    # Every `migrate` creates the readings' day partitions ingest may write to (PostgreSQL).
    from django.db import connections

    from portal.core import engine
    from portal.telemetry.services.partitions import reading_partitions_ensure

    if engine.partitioned_tables(connections[using]) and using == "default":
        reading_partitions_ensure()


class TelemetryConfig(AppConfig):
    name = "portal.telemetry"
    label = "telemetry"

    def ready(self):
        post_migrate.connect(_partitions_ensure, sender=self, dispatch_uid="telemetry_partitions")
        # checks and panels register themselves
        from portal.telemetry import checks, enqueue, hooks, panels  # noqa: F401
        from portal.telemetry.services import rollups

        hooks.batch_stored.subscribe("pipeline")(enqueue.pipeline_batch_stored)
        hooks.pipeline_stages.subscribe("rollups", order=20)(rollups.rollups_prepare)
