from django.apps import AppConfig


class WearOffConfig(AppConfig):
    name = "bench.wear_off"
    label = "bench_wear_off"

    def ready(self):
        from portal.telemetry import hooks

        hooks.pipeline_stages.unsubscribe("wear")
