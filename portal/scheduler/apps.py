from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "portal.scheduler"
    label = "scheduler"
    verbose_name = "Scheduler (Slurm)"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.diagnostics import hooks as diagnostics_hooks
        from portal.maintenance import hooks as maintenance_hooks
        from portal.scheduler import checks, enqueue, panels  # noqa: F401 - checks and panels register themselves
        from portal.scheduler.models import SchedulerAction

        auditlog.register(SchedulerAction, exclude_fields=["claimed_until", "outcome_msg"])
        maintenance_hooks.ticket_changed.subscribe("scheduler")(enqueue.ticket_changed)
        diagnostics_hooks.diagnostic_finished.subscribe("scheduler")(enqueue.diagnostic_finished)
        diagnostics_hooks.burn_in_requested.subscribe("scheduler")(enqueue.burn_in_requested)
