"""Every row of prometheus-v1.md's mapping: samples of one GPU at one timestamp become one reading,
stored by the agents' own ingest, handed on once complete."""

import datetime as dt
import math
import struct

import pytest
from django.utils import timezone

from portal.fleet.models import Gpu, Host
from portal.remote_write.mapping import BAD_LABELS, series_identity
from portal.remote_write.models import FedHost, IngestSource, PendingReading
from portal.remote_write.services.hand_on import remote_readings_hand_on
from portal.remote_write.services.sources import ingest_source_issue
from portal.telemetry.models import Reading, XidEvent
from portal.telemetry.services import host_token_issue
from tests.remote_write.helpers import (
    FULL,
    HOSTNAME,
    UUID_A,
    UUID_B,
    body,
    instant,
    labels,
    now_ms,
    post,
    sample_series,
)

pytestmark = pytest.mark.django_db
LATER = dt.timedelta(minutes=5)  # past two scrape intervals: every pending reading is complete


def write(source, series):
    answer = post(source.client, source.token, body(series))
    assert answer.status_code == 204, answer.content
    return answer


def hand_on_all():
    return remote_readings_hand_on(now=timezone.now() + LATER)


def stored(uuid=UUID_A):
    return list(Reading.objects.filter(gpu__uuid=uuid).order_by("ts"))


def test_every_series_gives_its_field(source):
    ts = now_ms(-60)
    write(source, sample_series(FULL, ts))
    assert hand_on_all().readings == 1
    (reading,) = stored()
    assert reading.ts == instant(ts)
    assert (reading.temperature_c, reading.power_w, reading.energy_mj) == (64, 412.5, 123456789.0)
    assert (reading.utilization_gpu_pct, reading.utilization_memory_pct, reading.memory_used_mib) == (97, 41, 80211)
    assert (reading.sm_clock_mhz, reading.mem_clock_mhz, reading.fan_speed_pct) == (1980, 2619, 30)
    assert (reading.pcie_replay_count, reading.ecc_corrected_volatile, reading.ecc_uncorrected_volatile) == (2, 3, 0)
    assert reading.remapped_rows_failure is False and reading.remapped_rows_pending is False  # first: the baseline
    assert reading.throttle_reasons == 4  # sw_power_cap, stored as ingest stores names
    # Fields without a series are null.
    assert reading.power_limit_w is None and reading.pstate is None and reading.pcie_link_gen is None
    assert not PendingReading.objects.exists()


def test_inventory_from_the_labels(source):
    write(source, sample_series(FULL, now_ms(-60)))
    hand_on_all()
    gpu = Gpu.objects.get(uuid=UUID_A)
    assert (gpu.index, gpu.model_name, gpu.pci_bus_id) == (0, "NVIDIA H100 80GB HBM3", "00000000:1B:00.0")
    assert gpu.host.hostname == HOSTNAME and gpu.host.driver_version == "580.65.06"
    assert FedHost.objects.get(host=gpu.host).source == source.record


def test_hostname_from_instance_without_a_hostname_label(source):
    series = [(labels("DCGM_FI_DEV_GPU_TEMP", hostname=None, instance="prom-node-9:9400"), [(now_ms(-60), 50)])]
    write(source, series)
    hand_on_all()
    assert Gpu.objects.get(uuid=UUID_A).host.hostname == "prom-node-9"


def test_throttle_mask_decoded_to_names(source):
    write(source, sample_series({"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x40 | 0x20 | 0x8 | 0x400}, now_ms(-60)))
    hand_on_all()
    from portal.telemetry.models import throttle_names

    assert throttle_names(stored()[0].throttle_reasons) == ["hw_slowdown", "sw_thermal", "hw_thermal"]


def test_remap_failure_and_remapped_rows_growing(source):
    base = now_ms(-120)
    for step, (failure, remapped) in enumerate([(0, 1), (0, 1), (3, 2), (0, 2)]):
        values = {"DCGM_FI_DEV_ROW_REMAP_FAILURE": failure, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": remapped}
        write(source, sample_series(values, base + step * 15_000))
    hand_on_all()
    assert [r.remapped_rows_failure for r in stored()] == [False, False, True, False]
    assert [r.remapped_rows_pending for r in stored()] == [False, False, True, False]


def test_xid_series_change_is_an_xid_event(source):
    base = now_ms(-120)
    for step, code in enumerate([13, 13, 79, 79, 0, 48]):  # the first is the baseline
        write(source, sample_series({"DCGM_FI_DEV_XID_ERRORS": code}, base + step * 15_000))
    hand_on_all()
    events = list(XidEvent.objects.order_by("ts").values_list("code", "ts"))
    assert [code for code, _ in events] == [79, 48]
    assert events[0][1] == instant(base + 2 * 15_000)


@pytest.mark.parametrize(
    ("extra", "jobs"),
    [
        ({"pod": "train-0", "namespace": "ml"}, ("k8s:ml/train-0",)),
        ({"hpc_job": "4242"}, ("slurm:4242",)),
        ({"pod": "train-0", "namespace": "ml", "hpc_job": "7"}, ("k8s:ml/train-0", "slurm:7")),
        ({"pod": "", "namespace": ""}, ()),  # the labels, empty: no job on the GPU
        ({}, None),  # no job labels: nobody can tell
    ],
)
def test_jobs_from_pod_namespace_and_hpc_job(source, extra, jobs):
    assert series_identity(labels("DCGM_FI_DEV_GPU_TEMP", **extra)).jobs == jobs
    # The reading carries them through ingest's validation of `jobs` (which does not keep them yet).
    write(source, sample_series({"DCGM_FI_DEV_GPU_TEMP": 60}, now_ms(-60), **extra))
    assert hand_on_all().readings == 1


def test_a_job_label_that_breaks_the_key_rules_skips_the_series(source):
    assert series_identity(labels("DCGM_FI_DEV_GPU_TEMP", pod="a pod", namespace="ml")) == BAD_LABELS
    write(source, sample_series({"DCGM_FI_DEV_GPU_TEMP": 60}, now_ms(-60), hpc_job="x" * 200))
    assert IngestSource.objects.get().samples_skipped == 1


def test_samples_a_reading_cannot_use_are_skipped_and_counted(source):
    ts = now_ms(-60)
    stale = struct.unpack("<d", (0x7FF0000000000002).to_bytes(8, "little"))[0]
    series = [
        (labels("DCGM_FI_DEV_GPU_TEMP"), [(ts, 61)]),
        (labels("DCGM_FI_DEV_GPU_UTIL"), [(ts, stale)]),  # a staleness marker: ignored, not counted
        (labels("DCGM_FI_DEV_SM_ACTIVE"), [(ts, 0.5)]),  # a series the mapping does not know
        ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": HOSTNAME}, [(ts, 60)]),  # no UUID
        (labels("DCGM_FI_DEV_POWER_USAGE", uuid=UUID_B, hostname="prom bad host"), [(ts, 300)]),  # identifiers
        (labels("DCGM_FI_DEV_FB_USED"), [(now_ms(-8 * 86400), 5)]),  # older than the acceptance window
        (labels("DCGM_FI_DEV_MEM_CLOCK"), [(now_ms(3600), 5)]),  # an hour in the future
        (labels("DCGM_FI_DEV_FAN_SPEED"), [(ts, 250)]),  # past 100 %
        (labels("DCGM_FI_DEV_POWER_USAGE"), [(ts, math.inf)]),
    ]
    write(source, series)
    record = IngestSource.objects.get()
    assert (record.samples_stored, record.samples_skipped, record.samples_dropped) == (1, 7, 0)
    hand_on_all()
    (reading,) = stored()
    assert reading.temperature_c == 61 and reading.fan_speed_pct is None and reading.power_w is None


def test_hosts_outside_the_pattern_are_dropped_and_counted(source):
    write(source, sample_series(FULL, now_ms(-60), hostname="dgx-01"))
    assert not Host.objects.filter(hostname="dgx-01").exists()
    assert IngestSource.objects.get().samples_dropped == len(FULL)


def test_a_host_an_agent_reports_is_never_fed(source):
    host_token_issue(hostname=HOSTNAME, create_host=True)
    write(source, sample_series(FULL, now_ms(-60)))
    assert not PendingReading.objects.exists() and not FedHost.objects.exists()
    assert IngestSource.objects.get().samples_dropped == len(FULL)


def test_a_host_another_source_feeds_is_dropped(source):
    other = ingest_source_issue(name="other", hosts="*")
    post(source.client, other.token, body(sample_series(FULL, now_ms(-60))))
    write(source, sample_series(FULL, now_ms(-30)))
    assert IngestSource.objects.get(pk=source.record.pk).samples_dropped == len(FULL)


def test_a_gpu_of_another_host_is_dropped(source):
    write(source, sample_series(FULL, now_ms(-60)))
    hand_on_all()
    write(source, sample_series(FULL, now_ms(-30), hostname="prom-node-2"))  # the same GPU on another host
    assert IngestSource.objects.get().samples_dropped == len(FULL)


def test_a_reading_split_across_requests_in_either_order_is_one_reading(source):
    t1, t2, t3 = now_ms(-90), now_ms(-60), now_ms(-30)
    both = {"DCGM_FI_DEV_GPU_TEMP": 70, "DCGM_FI_DEV_POWER_USAGE": 300}
    write(source, sample_series(both, t1))
    hand_on_all()  # the GPU's first reading: now its readings are known to hold both fields
    # Prometheus's shards: temperatures of t2 and t3 first, then power of t3, then power of t2.
    write(source, [(labels("DCGM_FI_DEV_GPU_TEMP"), [(t2, 71), (t3, 72)])])
    write(source, sample_series({"DCGM_FI_DEV_POWER_USAGE": 303}, t3))
    remote_readings_hand_on()  # (the write sent one too)
    assert len(stored()) == 1  # t2 lacks its power: no rule judges half a reading
    write(source, sample_series({"DCGM_FI_DEV_POWER_USAGE": 302}, t2))
    remote_readings_hand_on()  # t2 complete; t3 waits for a later reading, or two scrape intervals
    assert [(r.temperature_c, r.power_w) for r in stored()] == [(70, 300), (71, 302)]
    assert hand_on_all().readings == 1
    assert [(r.temperature_c, r.power_w) for r in stored()][-1] == (72, 303)


def test_a_late_field_for_a_reading_handed_on_is_skipped(source):
    ts = now_ms(-60)
    write(source, sample_series({"DCGM_FI_DEV_GPU_TEMP": 70}, ts))
    hand_on_all()
    write(source, sample_series({"DCGM_FI_DEV_GPU_TEMP": 70, "DCGM_FI_DEV_POWER_USAGE": 300}, ts))  # sent again
    assert not PendingReading.objects.exists()
    record = IngestSource.objects.get()
    assert (record.samples_stored, record.samples_skipped) == (1, 2)
    assert len(stored()) == 1


def test_a_reading_ingest_refuses_is_counted_never_a_500(source, settings):
    settings.MAX_GPUS_PER_HOST = 1  # the second GPU of the host is past the bound: ingest's 403
    ts = now_ms(-60)
    write(source, sample_series(FULL, ts) + sample_series(FULL, ts, uuid=UUID_B, gpu="1"))
    result = hand_on_all()
    assert result.readings == 1 and result.dropped == len(FULL)
    assert IngestSource.objects.get().samples_dropped == len(FULL)
    assert not PendingReading.objects.exists()


def test_a_throttling_series_opens_the_ticket_an_agent_reading_would(source, django_capture_on_commit_callbacks):
    from portal.maintenance.models import Ticket
    from tests.telemetry.batches import make_batch, make_reading, post_batch

    start = timezone.now() - dt.timedelta(minutes=15)
    steps = [start + dt.timedelta(seconds=30 * step) for step in range(25)]  # 12 minutes of readings
    agent = host_token_issue(hostname="dgx-07", create_host=True)
    batch = make_batch("dgx-07", readings=0)
    batch["readings"] = [make_reading(batch["gpus"][0]["uuid"], ts, throttle_reasons=["hw_thermal"]) for ts in steps]
    with django_capture_on_commit_callbacks(execute=True):
        assert post_batch(source.client, agent.token, batch).status_code == 202
        for ts in steps:
            throttling = {**FULL, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x40}  # hw_thermal
            write(source, sample_series(throttling, int(ts.timestamp() * 1000)))
        hand_on_all()
    tickets = {ticket.gpu.host.hostname: ticket for ticket in Ticket.objects.select_related("gpu__host")}
    assert tickets.keys() == {"dgx-07", HOSTNAME}
    agents, prometheus = tickets["dgx-07"], tickets[HOSTNAME]
    assert (prometheus.rule, prometheus.severity, prometheus.state) == (agents.rule, agents.severity, agents.state)
    assert prometheus.rule == "thermal_throttle"
