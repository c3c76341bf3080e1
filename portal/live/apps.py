from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "portal.live"
    label = "live"

    def ready(self):
        from portal.live import signals
        from portal.live.publish import readings_published, ticket_event_published
        from portal.maintenance.hooks import on_ticket_changed
        from portal.telemetry.hooks import on_batch_stored

        signals.connect()
        on_batch_stored("live", with_readings=True)(readings_published)
        on_ticket_changed("live")(ticket_event_published)
        _fleet_pages()


def _fleet_pages():
    """The fleet page's tiles and the GPU page's charts (fleet.pages)."""
    from portal.fleet import pages
    from portal.live import selectors

    @pages.on_page("fleet", "live")
    def _tiles(**context):
        return {"ticket_counts": selectors.open_ticket_counts()}

    @pages.on_page("gpu", "live")
    def _charts(*, gpu, records, **context):
        return {"live_config": selectors.gpu_live_config(gpu=gpu, records=records)}
