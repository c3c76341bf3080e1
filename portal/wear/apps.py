from django.apps import AppConfig


class WearConfig(AppConfig):
    name = "portal.wear"
    label = "wear"

    def ready(self):
        from portal.fleet import pages
        from portal.telemetry.pipeline import pipeline_stage
        from portal.wear import selectors, services

        pipeline_stage("wear", order=30)(services.wear_prepare)

        @pages.on_page("gpu", "wear")
        def _gpu_wear(*, gpu, **context):
            return {"wear_panel": selectors.gpu_wear_panel(gpu=gpu)}
