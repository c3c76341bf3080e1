from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "portal.jobs"
    label = "jobs"

    def ready(self):
        from portal.jobs import spans
        from portal.telemetry import hooks

        hooks.pipeline_stages.subscribe("jobs", order=40)(spans.spans_prepare)
