from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "portal.live"
    label = "live"
