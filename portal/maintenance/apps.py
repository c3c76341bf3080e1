from django.apps import AppConfig


class MaintenanceConfig(AppConfig):
    name = "portal.maintenance"
    label = "maintenance"

    def ready(self):
        from auditlog.registry import auditlog
        from django.db.models.signals import post_save

        from portal.fleet.models import MaintenanceRecord
        from portal.maintenance import enqueue, hooks, messages  # noqa: F401 - its messages register themselves
        from portal.maintenance.models import RuleConfig, Silence
        from portal.maintenance.services.evaluate import rules_prepare
        from portal.telemetry.pipeline import pipeline_stage

        auditlog.register(Silence)
        auditlog.register(RuleConfig)

        pipeline_stage("rules", order=10)(rules_prepare)
        hooks.on_notifications_ready(enqueue.notifications_enqueue)
        _fleet_pages()
        _fleet_swaps()

        post_save.connect(_record_saved, sender=MaintenanceRecord, dispatch_uid="maintenance.record_saved")


def _fleet_pages():
    """Fleet's pages colour values by the rules' limits and list the open tickets (fleet.pages)."""
    from portal.fleet import pages
    from portal.maintenance import selectors

    pages.on_care_limits(selectors.RuleCareLimits.for_hosts)

    @pages.on_page("host", "maintenance")
    def _host_tickets(*, host, **context):
        return {"open_ticket_list": selectors.open_tickets_for(host=host)}

    @pages.on_page("gpu", "maintenance")
    def _gpu_tickets(*, gpu, **context):
        return {"open_ticket_list": selectors.open_tickets_for(gpu=gpu)}


def _fleet_swaps():
    """A GPU replaced by a card swapped into its slot no longer counts as silent (fleet.swaps)."""
    from portal.fleet import swaps
    from portal.maintenance.services.tickets import tickets_resolve_swapped_out

    @swaps.on_gpu_swapped("maintenance")
    def _swapped_out(*, swap):
        tickets_resolve_swapped_out(
            host_id=swap.host_id, gpu_id=swap.old_gpu_id, at=swap.swapped_at,
            replacement=swap.new_gpu.serial or swap.new_gpu.uuid,
        )  # fmt: skip


def _record_saved(sender, instance, created, raw=False, **kwargs):
    """A bridge, not business logic: fleet's record services do not know about tickets, so a
    saved maintenance record is handed to maintenance.services.tickets_resolve_by_record."""
    if raw:
        return
    from portal.maintenance.services import tickets_resolve_by_record

    tickets_resolve_by_record(record=instance)
