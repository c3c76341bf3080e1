from django.apps import AppConfig


class WearConfig(AppConfig):
    name = "portal.wear"
    label = "wear"

    def ready(self):
        from portal.telemetry.hooks import on_batch_stored
        from portal.wear import enqueue

        on_batch_stored("wear", with_readings=True)(enqueue.wear_batch_stored)
