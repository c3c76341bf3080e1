from django.apps import AppConfig


class DiagnosticsConfig(AppConfig):
    name = "portal.diagnostics"
    label = "diagnostics"
    verbose_name = "Diagnostics"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.diagnostics import panels, services
        from portal.diagnostics.models import Diagnostic
        from portal.fleet import hooks as fleet_hooks
        from portal.fleet import pages
        from portal.maintenance import hooks as maintenance_hooks
        from portal.telemetry import hooks as telemetry_hooks

        auditlog.register(Diagnostic, include_fields=["state", "level", "purpose", "requested_by", "host"])
        telemetry_hooks.on_host_commands("diagnostics")(services.host_commands)
        fleet_hooks.on_gpu_registered("diagnostics")(services.gpu_registered)
        fleet_hooks.on_return_to_service("diagnostics")(services.return_to_service_guard)
        maintenance_hooks.on_ticket_changed("diagnostics")(services.ticket_changed)
        services.on_diagnostic_finished("diagnostics-gate")(services.gate_diagnostic_finished)
        pages.on_page("host", "diagnostics")(panels.host_page_panel)
        pages.on_page("gpu", "diagnostics")(panels.gpu_page_panel)
        pages.on_page("gpu_rows", "diagnostics")(panels.gpu_rows_panel)
        pages.on_page("ticket", "diagnostics")(panels.ticket_page_panel)
