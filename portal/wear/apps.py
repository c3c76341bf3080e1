from django.apps import AppConfig


class WearConfig(AppConfig):
    name = "portal.wear"
    label = "wear"

    def ready(self):
        from portal.fleet import pages
        from portal.telemetry.hooks import on_batch_stored, raw_readings_needed
        from portal.telemetry.pipeline import pipeline_stage
        from portal.wear import enqueue, selectors, services

        on_batch_stored("wear", with_readings=True)(enqueue.wear_batch_stored)
        raw_readings_needed("wear")(services.wear_oldest_uncounted)
        pipeline_stage("wear")(services.wear_backlog)

        @pages.on_page("gpu", "wear")
        def _gpu_wear(*, gpu, **context):
            return {"wear_panel": selectors.gpu_wear_panel(gpu=gpu)}
