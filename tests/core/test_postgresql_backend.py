"""The PostgreSQL backend reads timestamps with psycopg's compiled loader, giving the same aware UTC
datetimes Django's own loader gives."""

import datetime as dt

import pytest
from psycopg.pq import Format

from portal.core.postgresql_backend.base import COMPILED_TIMESTAMPTZ_LOADER, TIMESTAMPTZ_OID
from portal.telemetry.models import IngestBatch
from tests.factories import HostFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_timestamps_come_back_as_aware_utc_datetimes_through_the_compiled_loader(require_postgres):
    connection = require_postgres
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT) is COMPILED_TIMESTAMPTZ_LOADER
        assert COMPILED_TIMESTAMPTZ_LOADER.__module__ != "psycopg.types.datetime"  # psycopg[binary]'s C loader
        cursor.execute("SELECT TIMESTAMPTZ '2026-03-01 10:17:23.123456+02:00', TIMESTAMPTZ '1999-12-31 23:59:59Z'")
        first, second = cursor.fetchone()
    assert first == dt.datetime(2026, 3, 1, 8, 17, 23, 123456, tzinfo=dt.UTC)
    assert first.utcoffset() == dt.timedelta(0) and second == dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
    # and through the ORM, a value written and read back
    moment = dt.datetime(2026, 12, 4, 18, 0, 0, 654321, tzinfo=dt.UTC)
    batch = IngestBatch.objects.create(host=HostFactory(), batch_id="6f1c1a2b-0000-4b4e-9d0a-6f1c1a2b3c4d",
                                       sent_at=moment, received_at=moment, reading_count=0)  # fmt: skip
    assert IngestBatch.objects.values_list("sent_at", flat=True).get(pk=batch.pk) == moment
