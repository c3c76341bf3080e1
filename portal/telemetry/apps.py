from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "portal.telemetry"
    label = "telemetry"

    def ready(self):
        from portal.accounts.roles import role_flags
        from portal.fleet import pages
        from portal.telemetry import enqueue, pipeline, selectors
        from portal.telemetry.hooks import on_batch_stored, raw_readings_needed
        from portal.telemetry.services import rollups

        on_batch_stored("pipeline")(enqueue.pipeline_batch_stored)
        pipeline.pipeline_stage("rollups", order=20)(rollups.rollups_prepare)
        raw_readings_needed("pipeline")(pipeline.oldest_pending_reading)

        @pages.on_page("host", "telemetry")
        def _host_tokens(*, request, host, **context):
            # The host page's agent tokens, for those who may see them.
            if not request.user.has_perm("telemetry.view_hosttoken"):
                return {}
            return {"tokens": selectors.host_tokens(host=host)}

        @pages.on_page("fleet", "pipeline")
        def _pipeline(*, request, **context):
            # Admins only: a stage that falls behind is theirs to look into.
            if not role_flags(request.user)["admin"]:
                return {}
            return {"pipeline_lagging": pipeline.pipeline_lagging()}
