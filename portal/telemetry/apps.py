from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "portal.telemetry"
    label = "telemetry"
