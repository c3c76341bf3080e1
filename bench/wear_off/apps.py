from django.apps import AppConfig


class WearOffConfig(AppConfig):
    name = "bench.wear_off"
    label = "bench_wear_off"

    def ready(self):
        from portal.telemetry import pipeline

        pipeline._stages.pop("wear", None)
