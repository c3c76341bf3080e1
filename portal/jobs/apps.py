from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "portal.jobs"
    label = "jobs"

    def ready(self):
        from portal.jobs import panels, selectors, spans  # noqa: F401 - panels register themselves
        from portal.maintenance import hooks as maintenance_hooks
        from portal.telemetry import hooks

        hooks.pipeline_stages.subscribe("jobs", order=40)(spans.spans_prepare)
        maintenance_hooks.ticket_jobs.provide("jobs")(selectors.tickets_jobs)
