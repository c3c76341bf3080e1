from django.apps import AppConfig


class MaintenanceConfig(AppConfig):
    name = "portal.maintenance"
    label = "maintenance"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.maintenance import enqueue, hooks, messages, panels  # noqa: F401 - messages and panels register themselves
        from portal.maintenance.models import RuleConfig, Silence
        from portal.maintenance.services.evaluate import rules_prepare
        from portal.telemetry import hooks as telemetry_hooks

        auditlog.register(Silence)
        auditlog.register(RuleConfig)

        telemetry_hooks.pipeline_stages.subscribe("rules", order=10)(rules_prepare)
        # Maintenance's own: the services cannot import the tasks (the tasks import them).
        hooks.notifications_ready.subscribe("maintenance")(enqueue.notifications_enqueue)
        _fleet_hooks()


def _fleet_hooks():
    """Fleet's pages colour values by the rules' limits; a saved record resolves the tickets it
    answers; a GPU replaced by a card swapped into its slot no longer counts as silent."""
    from portal.fleet import hooks
    from portal.maintenance import selectors
    from portal.maintenance.services.tickets import tickets_resolve_by_record, tickets_resolve_swapped_out

    hooks.care_limits.provide("maintenance")(selectors.RuleCareLimits.for_hosts)
    hooks.record_saved.subscribe("maintenance")(tickets_resolve_by_record)

    @hooks.gpu_swapped.subscribe("maintenance")
    def _swapped_out(*, swap):
        tickets_resolve_swapped_out(
            host_id=swap.host_id, gpu_id=swap.old_gpu_id, at=swap.swapped_at,
            replacement=swap.new_gpu.serial or swap.new_gpu.uuid,
        )  # fmt: skip
