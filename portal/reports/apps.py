from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "portal.reports"
    label = "reports"

    def ready(self):
        from portal.reports import panels  # noqa: F401 - panels register themselves
