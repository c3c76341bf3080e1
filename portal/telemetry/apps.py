from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "portal.telemetry"
    label = "telemetry"

    def ready(self):
        from portal.fleet import pages
        from portal.telemetry import selectors

        @pages.on_page("host", "telemetry")
        def _host_tokens(*, request, host, **context):
            # The host page's agent tokens, for those who may see them.
            if not request.user.has_perm("telemetry.view_hosttoken"):
                return {}
            return {"tokens": selectors.host_tokens(host=host)}
