from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "portal.core"
    label = "core"
    default = True

    def ready(self):
        from portal.core import public_url  # noqa: F401 - its check registers itself
