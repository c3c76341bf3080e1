"""EpochMs: the database's milliseconds since 1970 are Python's, on SQLite and PostgreSQL."""

import datetime as dt

import pytest

from portal.core.db import EpochMs
from portal.telemetry.models import GpuLatest
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db

MOMENTS = [
    dt.datetime(2026, 12, 3, 17, 0, 0, 0, tzinfo=dt.UTC),
    dt.datetime(2026, 12, 3, 17, 0, 0, 123_456, tzinfo=dt.UTC),
    dt.datetime(2026, 12, 3, 17, 0, 0, 999_700, tzinfo=dt.UTC),  # rounds into the next second
    dt.datetime(2024, 2, 29, 23, 59, 59, 1_200, tzinfo=dt.UTC),
    dt.datetime(1999, 12, 31, 23, 59, 59, 998_800, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    dt.datetime(2038, 1, 19, 3, 14, 8, 400, tzinfo=dt.UTC),
]


def test_epoch_ms_is_the_rounded_python_timestamp():
    for moment in MOMENTS:
        GpuLatest.objects.create(gpu=GpuFactory(), ts=moment, received_at=moment)
    got = dict(GpuLatest.objects.values_list("ts", EpochMs("ts")))
    assert got == {moment: round(moment.timestamp() * 1000) for moment in MOMENTS}
