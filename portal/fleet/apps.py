from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "portal.fleet"
    label = "fleet"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.fleet.models import Attachment, Gpu, GpuStatusRefusal, Host, MaintenanceRecord

        # Only the model's own columns: auditlog would otherwise log reverse relations (a host's
        # "gpus", "records", other apps' tickets) as "None → fleet.Gpu.None" on every create.
        def own_fields(model, exclude=()):
            return [f.name for f in model._meta.concrete_fields if f.name not in exclude]

        # The agent's running counters change with its every report: not a person's change, and
        # logging them would flood the audit trail (they stay on the host page).
        auditlog.register(Host, include_fields=own_fields(Host, exclude=["dropped_batches", "rejected_batches"]))
        auditlog.register(Gpu, include_fields=own_fields(Gpu))
        auditlog.register(MaintenanceRecord, include_fields=own_fields(MaintenanceRecord))
        auditlog.register(Attachment, include_fields=own_fields(Attachment, exclude=["file"]))
        # A refused status change writes nothing else: this row is its line in the audit trail.
        auditlog.register(GpuStatusRefusal, include_fields=own_fields(GpuStatusRefusal))
