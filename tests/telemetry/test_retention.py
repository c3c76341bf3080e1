"""telemetry_prune: old raw readings and XID events go in bounded chunks, finished batch rows fold
into compact keys; old 1-minute rollups go; 1-hour rollups and recent data stay."""

import datetime as dt
import uuid as uuidlib

import pytest

from portal.telemetry.models import BatchSeen, IngestBatch, Reading, Rollup1h, Rollup1m, StageDone, XidEvent
from portal.telemetry.pipeline import stages
from portal.telemetry.services.batches import batch_key
from portal.telemetry.services.retention import telemetry_prune
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


def ago(**kwargs) -> dt.datetime:
    return NOW - dt.timedelta(**kwargs)


@pytest.fixture
def old_and_new(settings):
    settings.RETENTION_RAW_DAYS = 14
    settings.RETENTION_1M_DAYS = 90
    gpu, other = GpuFactory(), GpuFactory()
    # Readings this old cannot come in through the API (it refuses anything over 24 h), hence the ORM.
    old_readings = [
        Reading(gpu=g, ts=ago(days=14, minutes=1 + i), temperature_c=50) for i in range(7) for g in (gpu, other)
    ]
    kept_readings = [Reading(gpu=gpu, ts=ago(days=13, hours=23, minutes=59)), Reading(gpu=gpu, ts=ago(minutes=5))]
    Reading.objects.bulk_create(old_readings + kept_readings)
    XidEvent.objects.bulk_create(
        [XidEvent(gpu=gpu, ts=ago(days=20), code=79), XidEvent(gpu=gpu, ts=ago(days=1), code=48)]
    )

    def batch(received, done):
        # A finished batch's reading is past (compressed or pruned); a pending one's would hold retention back.
        stored = IngestBatch.objects.create(
            batch_id=uuidlib.uuid4(), host=gpu.host, sent_at=received, received_at=received, reading_count=1,
            first_ts=received if done else None, last_ts=received if done else None,
        )  # fmt: skip
        if done:  # every stage of the pipeline has finished it
            StageDone.objects.bulk_create([StageDone(stage=stage.name, batch_pk=stored.pk) for stage in stages()])
        return stored

    batches = {
        "old": batch(ago(days=15), True),
        "old-pending": batch(ago(days=15), False),
        "new": batch(ago(days=2), True),
    }
    Rollup1m.objects.bulk_create(
        [Rollup1m(gpu=gpu, bucket=ago(days=90, minutes=m + 1), count=1) for m in range(5)]
        + [Rollup1m(gpu=gpu, bucket=ago(days=89), count=1), Rollup1m(gpu=gpu, bucket=ago(days=20), count=1)]
    )
    Rollup1h.objects.bulk_create(
        [Rollup1h(gpu=gpu, bucket=ago(days=400), count=60), Rollup1h(gpu=gpu, bucket=ago(days=100), count=60)]
    )
    return {"gpu": gpu, "kept_readings": kept_readings, "batches": batches}


def test_prune_deletes_what_is_past_retention_and_keeps_the_rest(old_and_new):
    deleted = telemetry_prune(now=NOW, chunk=4)

    # Finished batches fold into compact keys; the 15-day-old one's key goes too (ingest refuses its readings).
    assert deleted == {"readings": 14, "xid_events": 1, "batches": 2, "batch_keys": 1, "rollups_1m": 5}
    assert sorted(Reading.objects.values_list("ts", flat=True)) == [ago(days=13, hours=23, minutes=59), ago(minutes=5)]
    assert list(XidEvent.objects.values_list("code", flat=True)) == [48]
    batches = old_and_new["batches"]
    # a batch a stage has not finished is still work, whatever its age
    assert set(IngestBatch.objects.values_list("pk", flat=True)) == {batches["old-pending"].pk}
    assert [bytes(key.ids) for key in BatchSeen.objects.all()] == [batch_key(batches["new"].batch_id)]
    assert sorted(Rollup1m.objects.values_list("bucket", flat=True)) == [ago(days=89), ago(days=20)]
    assert Rollup1h.objects.count() == 2

    assert telemetry_prune(now=NOW, chunk=4) == {
        "readings": 0, "xid_events": 0, "batches": 0, "batch_keys": 0, "rollups_1m": 0,
    }  # fmt: skip


def test_prune_works_in_bounded_chunks(old_and_new):
    # 14 old readings, 3 per chunk, at most 2 chunks per run: 6 go now, the rest on later runs
    assert telemetry_prune(now=NOW, chunk=3, max_chunks=2)["readings"] == 6
    assert Reading.objects.count() == 14 - 6 + 2
    assert telemetry_prune(now=NOW, chunk=3, max_chunks=2)["readings"] == 6
    assert telemetry_prune(now=NOW, chunk=3, max_chunks=2)["readings"] == 2
    assert telemetry_prune(now=NOW, chunk=3, max_chunks=2)["readings"] == 0
    assert Reading.objects.count() == 2


def test_retention_settings_are_read_at_run_time(old_and_new, settings):
    settings.RETENTION_RAW_DAYS = 30
    settings.RETENTION_1M_DAYS = 10
    deleted = telemetry_prune(now=NOW, chunk=100)
    assert deleted["readings"] == 0 and deleted["xid_events"] == 0
    assert deleted["rollups_1m"] == 7
    assert Rollup1h.objects.count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_ledgers_indexes_are_rebuilt_once_their_rows_are_gone(require_postgres):
    """Rows that came and went leave their index pages behind; beat's hourly job rebuilds the
    indexes of the ledger and of the batch rows once those are many times what the rows need."""
    from django.db import connection

    from portal.telemetry.services.retention import bookkeeping_indexes_renew

    def index_bytes() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_indexes_size('telemetry_stagedone')")
            return cursor.fetchone()[0]

    StageDone.objects.bulk_create(StageDone(stage="rules", batch_pk=pk) for pk in range(20_000))
    StageDone.objects.filter(batch_pk__lt=19_990).delete()
    grown = index_bytes()
    assert grown > 400_000
    assert bookkeeping_indexes_renew() == ["telemetry_stagedone"]
    assert index_bytes() <= 2 * 2 * 8192  # two indexes, a metapage and a leaf each
    assert StageDone.objects.count() == 10
    assert bookkeeping_indexes_renew() == []  # now in proportion to its rows
