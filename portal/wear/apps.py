from django.apps import AppConfig


class WearConfig(AppConfig):
    name = "portal.wear"
    label = "wear"

    def ready(self):
        from portal.telemetry.pipeline import pipeline_stage
        from portal.wear import panels, services  # noqa: F401 - panels register themselves

        pipeline_stage("wear", order=30)(services.wear_prepare)
