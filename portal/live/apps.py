from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "portal.live"
    label = "live"

    def ready(self):
        from portal.live import panels, signals  # noqa: F401 - panels register themselves
        from portal.live.publish import readings_published, ticket_event_published
        from portal.maintenance import hooks as maintenance_hooks
        from portal.telemetry import hooks as telemetry_hooks

        signals.connect()
        telemetry_hooks.batch_stored.subscribe("live")(readings_published)
        maintenance_hooks.ticket_changed.subscribe("live")(ticket_event_published)
