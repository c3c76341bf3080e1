from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "portal.live"
    label = "live"

    def ready(self):
        from portal.live.publish import readings_published
        from portal.telemetry.hooks import on_batch_stored

        on_batch_stored("live", with_readings=True)(readings_published)
