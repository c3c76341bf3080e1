from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "portal.metrics"
    label = "metrics"
