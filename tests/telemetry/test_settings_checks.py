"""Retention settings that would break the rollups stop the portal at start."""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from portal.telemetry.checks import retention_settings_check


def test_minute_rollups_kept_no_longer_than_late_readings_are_accepted_is_an_error(settings):
    settings.RETENTION_1M_DAYS, settings.INGEST_MAX_AGE_HOURS = 7, 168
    (error,) = retention_settings_check()
    assert error.id == "telemetry.E001" and "RETENTION_1M_DAYS" in error.msg and "INGEST_MAX_AGE_HOURS" in error.msg
    with pytest.raises(SystemCheckError, match="telemetry.E001"):
        call_command("check")


def test_the_defaults_and_a_longer_minute_retention_pass(settings):
    assert retention_settings_check() == []
    settings.RETENTION_1M_DAYS, settings.INGEST_MAX_AGE_HOURS = 8, 168
    assert retention_settings_check() == []
