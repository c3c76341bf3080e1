from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "portal.fleet"
    label = "fleet"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.fleet.models import Attachment, Gpu, Host, MaintenanceRecord

        auditlog.register(Host)
        auditlog.register(Gpu)
        auditlog.register(MaintenanceRecord)
        auditlog.register(Attachment, exclude_fields=["file"])
