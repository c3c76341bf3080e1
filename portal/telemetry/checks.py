"""Settings that cannot work stop the portal at start (Django runs these checks before serving,
migrating and starting workers through manage.py)."""

from django.conf import settings
from django.core.checks import Error, register


@register()
def retention_settings_check(app_configs=None, **kwargs) -> list[Error]:
    # An hour's rollup is built from its minute rows: a late batch (up to INGEST_MAX_AGE_HOURS
    # old) must still find its hour's other minutes kept, or the hour would be rebuilt from a few.
    minute_hours = settings.RETENTION_1M_DAYS * 24
    if minute_hours <= settings.INGEST_MAX_AGE_HOURS:
        return [
            Error(
                f"RETENTION_1M_DAYS ({settings.RETENTION_1M_DAYS} days) must keep minute rollups longer than "
                f"INGEST_MAX_AGE_HOURS ({settings.INGEST_MAX_AGE_HOURS} h) accepts late readings",
                hint="raise RETENTION_1M_DAYS or lower INGEST_MAX_AGE_HOURS",
                id="telemetry.E001",
            )
        ]
    return []
