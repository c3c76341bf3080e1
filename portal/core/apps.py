from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "portal.core"
    label = "core"
    default = True
