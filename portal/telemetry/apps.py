from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "portal.telemetry"
    label = "telemetry"

    def ready(self):
        from portal.accounts.roles import role_flags
        from portal.fleet import pages
        from portal.telemetry import pipeline, selectors

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
