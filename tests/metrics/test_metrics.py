"""`GET /metrics` (portal-api-v1.md, "Metrics for Prometheus"): token rules, the text format,
every family declared, samples from the latest readings, records, wear and tickets, and the
output checked by Prometheus' own `promtool check metrics`."""

import datetime as dt
import shutil
import subprocess

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.maintenance.models import Ticket
from portal.telemetry.models import GpuLatest
from portal.wear.models import WearState
from tests.conftest import skip_or_fail
from tests.factories import GpuFactory, HostFactory, RecordFactory

FAMILIES = {
    "gpufleet_gpu_temperature_celsius": "gauge",
    "gpufleet_gpu_power_watts": "gauge",
    "gpufleet_gpu_utilization_ratio": "gauge",
    "gpufleet_gpu_last_reading_timestamp_seconds": "gauge",
    "gpufleet_gpu_last_maintenance_timestamp_seconds": "gauge",
    "gpufleet_gpu_hot_seconds": "counter",
    "gpufleet_gpu_busy_seconds": "counter",
    "gpufleet_gpu_thermal_cycles": "counter",
    "gpufleet_gpu_energy_joules": "counter",
    "gpufleet_open_tickets": "gauge",
    "gpufleet_checklist_runs_due": "gauge",
    "gpufleet_pipeline_backlog_batches": "gauge",
    "gpufleet_pipeline_lag_seconds": "gauge",
}
TOKEN = "scrape-secret-0123"


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client, token=TOKEN):
    return client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.django_db
def test_unset_token_is_404(client, settings):
    settings.METRICS_TOKEN = ""
    assert scrape(client).status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Token {TOKEN}", "Bearer ", TOKEN])
def test_missing_or_wrong_token_is_401(client, token, header):
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    assert client.get("/metrics", **extra).status_code == 401


@pytest.mark.django_db
def test_a_logged_in_user_without_the_token_is_401(client_for, admin, token):
    assert client_for(admin).get("/metrics").status_code == 401


@pytest.mark.django_db
def test_every_family_is_declared_on_an_empty_portal(client, token):
    answer = scrape(client)
    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/plain; version=0.0.4"
    families = {f.name: f for f in text_string_to_metric_families(answer.content.decode())}
    assert {name: families[name].type for name in FAMILIES} == FAMILIES
    assert {s.labels["severity"]: s.value for s in families["gpufleet_open_tickets"].samples} == {
        "info": 0, "warning": 0, "critical": 0,
    }  # fmt: skip


@pytest.mark.django_db
def test_samples(client, token):
    now = timezone.now().replace(microsecond=0)
    host = HostFactory(hostname="dgx-m1")
    gpu = GpuFactory(host=host, index=3, model_name="NVIDIA H200")
    quiet = GpuFactory(host=host, index=4)  # no readings: no latest-reading samples
    GpuLatest.objects.create(gpu=gpu, ts=now, received_at=now, temperature_c=71, power_w=412.5, utilization_gpu_pct=97)
    WearState.objects.create(gpu=gpu, last_ts=now, last_reading=[now.timestamp()], first_hour=now, hot_s=7200.0,
                             busy_s=36000.0, cycles_total=12, energy_mj=3.6e9)  # fmt: skip
    RecordFactory(kind="cleaning", host=host, gpu=gpu, performed_at=now - dt.timedelta(days=3))
    RecordFactory(kind="driver_update", host=host, gpu=None, performed_at=now - dt.timedelta(days=1))
    Ticket.objects.create(fingerprint="f", rule="schedule_cleaning", host=host, title="Cleaning due", severity="info",
                          first_seen=now, last_seen=now)  # fmt: skip
    Ticket.objects.create(
        fingerprint="g",
        rule="overclock",
        host=host,
        gpu=gpu,
        title="Hot",
        severity="critical",
        first_seen=now,
        last_seen=now,
    )
    families = {f.name: f for f in text_string_to_metric_families(scrape(client).content.decode())}

    def samples(name):
        return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples}

    labels = (("hostname", "dgx-m1"), ("index", "3"), ("model", "NVIDIA H200"), ("uuid", gpu.uuid))
    assert samples("gpufleet_gpu_temperature_celsius") == {labels: 71}
    assert samples("gpufleet_gpu_utilization_ratio") == {labels: pytest.approx(0.97)}
    assert samples("gpufleet_gpu_last_reading_timestamp_seconds") == {labels: now.timestamp()}
    assert quiet.uuid not in str(samples("gpufleet_gpu_power_watts"))
    maintenance = samples("gpufleet_gpu_last_maintenance_timestamp_seconds")
    assert (
        maintenance[(("hostname", "dgx-m1"), ("kind", "cleaning"), ("uuid", gpu.uuid))]
        == (now - dt.timedelta(days=3)).timestamp()
    )
    # a host-wide record counts for each of its GPUs
    assert (("hostname", "dgx-m1"), ("kind", "driver_update"), ("uuid", quiet.uuid)) in maintenance
    wear = (("hostname", "dgx-m1"), ("uuid", gpu.uuid))
    assert samples("gpufleet_gpu_hot_seconds")[wear] == 7200
    assert samples("gpufleet_gpu_thermal_cycles")[wear] == 12
    assert samples("gpufleet_gpu_energy_joules")[wear] == pytest.approx(3.6e6)
    tickets = {s.labels["severity"]: s.value for s in families["gpufleet_open_tickets"].samples}
    assert tickets == {"info": 1, "warning": 0, "critical": 1}
    assert families["gpufleet_checklist_runs_due"].samples[0].value == 1  # the cleaning ticket


@pytest.mark.django_db
def test_promtool_accepts_the_output(client, token):
    promtool = shutil.which("promtool")
    if promtool is None:
        skip_or_fail("promtool missing: 'apt-get install prometheus' (make test installs it as root)")
    gpu = GpuFactory()
    now = timezone.now()
    GpuLatest.objects.create(gpu=gpu, ts=now, received_at=now, temperature_c=50, power_w=None)
    RecordFactory(kind="cleaning", host=gpu.host, gpu=gpu)
    checked = subprocess.run([promtool, "check", "metrics"], input=scrape(client).content, capture_output=True,
                             timeout=30)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.django_db
def test_checklist_work_due_counts_runs_in_progress_and_resolvable_tickets(client, token, technician):
    from portal.checklists import services as checklist_services

    def due():
        families = {f.name: f for f in text_string_to_metric_families(scrape(client).content.decode())}
        return families["gpufleet_checklist_runs_due"].samples[0].value

    host = HostFactory(hostname="dgx-due")
    GpuFactory(host=host, index=0)
    now = timezone.now()
    Ticket.objects.create(fingerprint="due-1", rule="schedule_cleaning", host=host, title="Cleaning due",
                          severity="info", first_seen=now, last_seen=now)  # fmt: skip
    assert due() == 1
    run = checklist_services.run_start(template_key="pre_training", hostname="dgx-due", gpu_uuids=None,
                                       user=technician)  # fmt: skip
    assert due() == 2
    checklist_services.run_abandon(run=run, reason="wrong host", user=technician)
    assert due() == 1
