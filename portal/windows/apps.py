from django.apps import AppConfig


class WindowsConfig(AppConfig):
    name = "portal.windows"
    label = "windows"
    verbose_name = "Planned maintenance windows"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.checklists import hooks as checklists_hooks
        from portal.scheduler import hooks as scheduler_hooks
        from portal.windows import enqueue, panels, selectors  # noqa: F401 - panels register themselves
        from portal.windows.models import MaintenanceWindow

        auditlog.register(
            MaintenanceWindow,
            exclude_fields=[
                "reservation_claimed_until",
                "reservation_attempted_at",
                "affected_jobs",
                "affected_jobs_at",
            ],  # fmt: skip
        )
        scheduler_hooks.window_holds.provide("windows")(selectors.window_holds)
        checklists_hooks.run_completed.subscribe("windows")(enqueue.run_completed)
