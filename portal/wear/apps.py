from django.apps import AppConfig


class WearConfig(AppConfig):
    name = "portal.wear"
    label = "wear"

    def ready(self):
        from portal.telemetry import hooks
        from portal.wear import panels, services  # noqa: F401 - panels register themselves

        hooks.pipeline_stages.subscribe("wear", order=30)(services.wear_prepare)
