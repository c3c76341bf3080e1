from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "portal.scheduler"
    label = "scheduler"
    verbose_name = "Scheduler (Slurm)"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.diagnostics import services as diagnostics
        from portal.maintenance import hooks
        from portal.scheduler import checks, enqueue, panels  # noqa: F401 - checks and panels register themselves
        from portal.scheduler.models import SchedulerAction

        auditlog.register(SchedulerAction, exclude_fields=["claimed_until"])
        hooks.on_ticket_changed("scheduler")(enqueue.ticket_changed)
        diagnostics.on_diagnostic_finished("scheduler")(enqueue.diagnostic_finished)
