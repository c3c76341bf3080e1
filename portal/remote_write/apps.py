from django.apps import AppConfig


class RemoteWriteConfig(AppConfig):
    name = "portal.remote_write"
    label = "remote_write"
    verbose_name = "Prometheus remote write"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.remote_write import panels  # noqa: F401 - registers the host page's panel
        from portal.remote_write.models import IngestSource

        # Sources made and revoked are in the audit trail (never their secret).
        auditlog.register(
            IngestSource,
            exclude_fields=["secret_hash", "last_write_at", "samples_stored", "samples_skipped", "samples_dropped"],
        )
