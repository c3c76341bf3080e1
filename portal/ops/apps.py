from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Installed for its management commands (`run`, `serve`); it has no models."""

    name = "portal.ops"
    label = "ops"
