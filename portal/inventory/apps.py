from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "portal.inventory"
    label = "inventory"
    verbose_name = "Inventory"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.inventory import subscriptions
        from portal.inventory.models import Part, RmaCase, StockMovement, Warranty

        # on_hand and a case's state change by conditional UPDATEs: the movements are rows of their
        # own, and a case's moves write their audit line themselves (services.rma).
        auditlog.register(Part, exclude_fields=["on_hand"])
        auditlog.register(StockMovement)
        auditlog.register(Warranty, exclude_fields=["ending_noticed_at"], m2m_fields={"hosts", "gpus"})
        auditlog.register(RmaCase)
        subscriptions.connect()
