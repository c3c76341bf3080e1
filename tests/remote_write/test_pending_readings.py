"""Pending readings: one row per GPU and timestamp, merged across requests; the readings a write
completes handed on by the write itself; migration 0002 carries waiting samples over."""

import datetime as dt

import orjson
import pytest
from django.utils import timezone

from portal.remote_write.models import IngestSource
from portal.remote_write.services.hand_on import remote_readings_hand_on
from portal.telemetry.models import Reading
from tests.migrations import migrate_to, migrate_to_newest
from tests.remote_write.helpers import (
    FULL,
    UUID_A,
    UUID_B,
    body,
    instant,
    labels,
    now_ms,
    pending_samples,
    post,
    sample_series,
)

BOTH = {"DCGM_FI_DEV_GPU_TEMP": 70, "DCGM_FI_DEV_POWER_USAGE": 300}


def write(source, series):
    answer = post(source.client, source.token, body(series))
    assert answer.status_code == 204, answer.content


def stored():
    return [(r.temperature_c, r.power_w) for r in Reading.objects.filter(gpu__uuid=UUID_A).order_by("ts")]


@pytest.mark.django_db
def test_a_request_of_many_timestamps_is_a_row_each_and_the_write_hands_on_what_it_completes(source):
    first = now_ms(-120)
    write(source, sample_series(BOTH, first))
    remote_readings_hand_on(now=timezone.now() + dt.timedelta(minutes=5))  # the GPU's first reading
    steps = [first + 15_000 * step for step in range(1, 5)]
    write(
        source,
        [
            (labels("DCGM_FI_DEV_GPU_TEMP"), [(ts, 71 + n) for n, ts in enumerate(steps)]),
            (labels("DCGM_FI_DEV_POWER_USAGE"), [(ts, 301 + n) for n, ts in enumerate(steps)]),
        ],
    )
    # No pass ran: the write itself handed on the three readings a later one completes.
    assert stored() == [(70, 300), (71, 301), (72, 302), (73, 303)]
    (key,) = pending_samples()  # the newest waits for a later reading, or two scrape intervals
    assert key == (UUID_A, instant(steps[-1]))
    assert IngestSource.objects.get().samples_stored == 2 + 8


@pytest.mark.django_db
def test_a_gpus_first_readings_wait_two_of_its_own_scrape_intervals(source):
    start = now_ms(-300)
    write(source, [(labels("DCGM_FI_DEV_GPU_TEMP"), [(start, 60), (start + 10_000, 61), (start + 20_000, 62)])])
    assert remote_readings_hand_on(now=timezone.now() + dt.timedelta(seconds=19)).readings == 0
    # 10 s apart: two intervals are 20 s (not the setting's 30 s scrape interval twice).
    assert remote_readings_hand_on(now=timezone.now() + dt.timedelta(seconds=21)).readings == 3


@pytest.mark.django_db
def test_parts_of_one_reading_in_three_requests_are_one_row_then_one_reading(source):
    ts = now_ms(-60)
    for name, value in FULL.items():
        write(source, sample_series({name: value}, ts))
    (samples,) = pending_samples().values()
    assert len(samples) == len(FULL)
    assert remote_readings_hand_on(now=timezone.now() + dt.timedelta(minutes=5)).readings == 1
    assert not pending_samples()


@pytest.mark.django_db
def test_a_write_sends_no_pass_that_would_hand_on_other_hosts_readings(source, settings, monkeypatch):
    """The pass after every write read every pending row to find nothing: a write hands on what it
    completes itself, and readings completed by waiting are the beat's pass's."""
    from portal.remote_write.services import hand_on

    write(source, sample_series(BOTH, now_ms(-60)))  # prom-node-1's first reading: waits
    monkeypatch.setattr(hand_on, "MIN_WAIT_S", 0.0)
    settings.REMOTE_WRITE_SCRAPE_INTERVAL_S = 0.0  # from now on a reading completes by waiting at once
    write(source, sample_series(BOTH, now_ms(-30), uuid=UUID_B, hostname="prom-node-2"))
    assert stored() == []  # prom-node-1's: no pass ran after the second write
    assert [uuid for uuid, _ in pending_samples()] == [UUID_A]
    assert remote_readings_hand_on().readings == 1
    assert stored() == [(70, 300)]


@pytest.mark.django_db
def test_readings_ingest_refused_in_a_write_are_handed_on_by_the_pass_it_sends(source, settings):
    first = now_ms(-120)
    write(source, sample_series(BOTH, first))
    assert remote_readings_hand_on(now=timezone.now() + dt.timedelta(minutes=5)).readings == 1
    settings.MAX_GPUS_PER_HOST = 1  # a second GPU of the host is past the bound: ingest's 403
    steps = (first + 15_000, first + 30_000)
    write(source, [series for ts in steps for uuid, gpu in ((UUID_A, "0"), (UUID_B, "1"))
                   for series in sample_series(BOTH, ts, uuid=uuid, gpu=gpu)])  # fmt: skip
    # The write's batch (GPU A's completed reading, GPU B in the inventory) refused; the pass the
    # write sent handed GPU A's on alone; GPU B's first readings wait, the newest of A too.
    assert stored() == [(70, 300), (70, 300)]
    assert sorted(pending_samples()) == sorted(
        [(UUID_A, instant(steps[1])), (UUID_B, instant(steps[0])), (UUID_B, instant(steps[1]))]
    )


BEFORE = [("remote_write", "0001_initial")]
AFTER = [("remote_write", "0002_pending_readings")]


@pytest.mark.django_db(transaction=True)
def test_migration_carries_waiting_samples_over_as_one_row_per_reading():
    from tests.factories import HostFactory

    try:
        old = migrate_to(BEFORE)
        host = HostFactory(hostname="prom-mig-1")
        source = old.get_model("remote_write", "IngestSource").objects.create(
            name="mig", hosts="*", prefix="p", secret_hash="h"
        )
        fed = old.get_model("remote_write", "FedHost").objects.create(host_id=host.pk, source=source)
        gpu = old.get_model("remote_write", "SourceGpu").objects.create(uuid=UUID_A, fed_host=fed)
        now = timezone.now().replace(microsecond=0)
        t1, t2 = now - dt.timedelta(seconds=30), now - dt.timedelta(seconds=15)
        samples = old.get_model("remote_write", "PendingSample").objects
        for ts, name, value, jobs in [
            (t1, "temperature_c", 60, None), (t1, "power_w", 300.5, '["slurm:7"]'), (t2, "temperature_c", 61, None)
        ]:  # fmt: skip
            samples.create(gpu=gpu, ts=ts, field=name, value=value, jobs=jobs, received_at=now)
        new = migrate_to(AFTER)
        rows = {row.ts: row for row in new.get_model("remote_write", "PendingReading").objects.all()}
        assert orjson.loads(rows[t1].samples) == {"temperature_c": 60, "power_w": 300.5}
        assert rows[t1].jobs == '["slurm:7"]' and rows[t2].jobs is None
        assert orjson.loads(rows[t2].samples) == {"temperature_c": 61}
    finally:
        migrate_to_newest()
