from django.apps import AppConfig


class DemoConfig(AppConfig):
    """`manage.py demo`: the portal with demo data and simulated agents (a top-level app: it
    drives every other one)."""

    name = "portal.demo"
    label = "demo"
