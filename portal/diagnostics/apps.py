from django.apps import AppConfig


class DiagnosticsConfig(AppConfig):
    name = "portal.diagnostics"
    label = "diagnostics"
    verbose_name = "Diagnostics"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.diagnostics import panels, services  # noqa: F401 - panels register themselves
        from portal.diagnostics.models import Diagnostic
        from portal.fleet import hooks as fleet_hooks
        from portal.maintenance import hooks as maintenance_hooks
        from portal.telemetry import hooks as telemetry_hooks

        auditlog.register(Diagnostic, include_fields=["state", "level", "purpose", "requested_by", "host"])
        telemetry_hooks.host_commands.subscribe("diagnostics")(services.host_commands)
        fleet_hooks.gpu_registered.subscribe("diagnostics")(services.gpu_registered)
        fleet_hooks.return_to_service_gate.provide("diagnostics")(services.return_to_service_guard)
        maintenance_hooks.ticket_changed.subscribe("diagnostics")(services.ticket_changed)
