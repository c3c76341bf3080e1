from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "portal.inventory"
    label = "inventory"
    verbose_name = "Inventory"

    def ready(self):
        from portal.inventory import subscriptions

        subscriptions.connect()
