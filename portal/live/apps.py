from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "portal.live"
    label = "live"

    def ready(self):
        from portal.live import panels, signals  # noqa: F401 - panels register themselves
        from portal.live.publish import readings_published, ticket_event_published
        from portal.maintenance.hooks import on_ticket_changed
        from portal.telemetry.hooks import on_batch_stored

        signals.connect()
        on_batch_stored("live", with_readings=True)(readings_published)
        on_ticket_changed("live")(ticket_event_published)
