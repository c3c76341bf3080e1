"""Automatic items: judged from telemetry when the run completes, with evidence; the cleaning
check waits for loaded readings after the run ("verification pending"), then the beat task judges it."""

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from portal.checklists import services
from portal.checklists.models import ChecklistRun
from portal.maintenance.models import Ticket
from tests.checklists.conftest import readings
from tests.factories import RecordFactory

pytestmark = pytest.mark.django_db

PRE_TRAINING = [
    {"item": "segments", "value": True},
    {"item": "clocks", "value": "pass"},
]
CLEANING = [
    {"item": "dust_level", "value": "heavy"}, {"item": "filters", "value": True},
    {"item": "fans_spin", "value": "pass"}, {"item": "airflow_path", "value": "pass"},
    {"item": "heatsink_fins", "value": "pass"},
]  # fmt: skip


def items_of(run):
    from portal.checklists.selectors import run_get, run_items

    return {i["key"]: i for i in run_items(run_get(pk=run.pk))}


def test_pre_training_auto_items_with_evidence(technician, host):
    now = timezone.now()
    g0, g1 = host.gpus.order_by("index")
    start = now - dt.timedelta(minutes=20)
    readings(
        g0,
        start=start,
        minutes=20,
        temperature_c=lambda n: 36 + n % 4,
        utilization_gpu_pct=0,
        fan_speed_pct=lambda n: 30 + n % 3,
        ecc_uncorrected_volatile=0,
        remapped_rows_pending=False,
    )
    readings(g1, start=start, minutes=20, temperature_c=52, utilization_gpu_pct=2, fan_speed_pct=0,
             ecc_uncorrected_volatile=3, remapped_rows_pending=False)  # fmt: skip
    RecordFactory(kind="backup", gpu=None, host=host, performed_at=now - dt.timedelta(days=2), dust_level="",
                  backup_content="both", destination="nas01:/b", verified=True)  # fmt: skip
    run = services.run_start(template_key="pre_training", hostname="node-a", gpu_uuids=None, user=technician)
    services.run_answer(run=run, answers=PRE_TRAINING, user=technician)
    run = services.run_complete(run=run, signature="Bob", user=technician)
    items = items_of(run)
    idle = items["idle_temperature"]
    assert idle["value"] == idle["outcome"] == "fail" and idle["answered_by"] == "portal"
    per_gpu = {g["gpu"]: g for g in idle["evidence"]["gpus"]}
    assert per_gpu["GPU 0"]["outcome"] == "pass" and per_gpu["GPU 0"]["median_c"] <= 39
    assert per_gpu["GPU 1"]["outcome"] == "fail" and per_gpu["GPU 1"]["median_c"] == 52
    assert items["fans"]["outcome"] == "fail"  # GPU 1's fan reads 0 %
    assert items["ecc"]["outcome"] == "fail" and "GPU 1" in items["ecc"]["evidence"]["summary"]
    assert items["backup"]["outcome"] == "pass" and items["backup"]["evidence"]["record"]["destination"] == "nas01:/b"
    tickets = Ticket.objects.filter(rule="checklist_failed")
    assert {t.gpu.index for t in tickets} == {1}  # one ticket per subject; each failed item an event on it
    assert "Idle temperature below 45 °C" in tickets.get().title
    assert tickets.get().events.count() == 3
    record = run.records.get(gpu=g0)
    assert record.kind == "inspection" and record.passed is False and "Idle temperature" in record.notes


def test_no_readings_is_unknown_and_opens_nothing_but_missing_backup_is_a_host_ticket(technician, host):
    run = services.run_start(template_key="pre_training", hostname="node-a", gpu_uuids=None, user=technician)
    services.run_answer(run=run, answers=PRE_TRAINING, user=technician)
    run = services.run_complete(run=run, signature="Bob", user=technician)
    items = items_of(run)
    assert [items[k]["outcome"] for k in ("idle_temperature", "fans", "ecc")] == ["unknown"] * 3
    assert items["backup"]["outcome"] == "fail"
    ticket = Ticket.objects.get(rule="checklist_failed")
    assert ticket.gpu is None and "backup" in ticket.title


def test_cleaning_effect_pending_then_judged_by_the_beat_task(technician, host):
    now = timezone.now()
    g0, g1 = host.gpus.order_by("index")
    for gpu in (g0, g1):
        readings(gpu, start=now - dt.timedelta(days=2), minutes=120, temperature_c=lambda n: 80 + n % 2,
                 power_w=lambda n: 240 + n % 20, utilization_gpu_pct=95)  # fmt: skip
    run = services.run_start(template_key="cleaning", hostname="node-a", gpu_uuids=None, user=technician)
    services.run_answer(run=run, answers=CLEANING, user=technician)
    run = services.run_complete(run=run, signature="Bob", user=technician, now=now)
    assert run.verification == "pending"
    item = items_of(run)["cooler_after"]
    assert item["outcome"] == "pending" and "verification pending" in item["evidence"]["summary"]
    assert run.records.count() == 2 and not Ticket.objects.filter(rule="checklist_failed").exists()
    # Not enough loaded readings yet: still pending.
    readings(g0, start=now + dt.timedelta(minutes=1), minutes=10, temperature_c=73, power_w=250, utilization_gpu_pct=95)
    assert services.verifications_finish(now=now + dt.timedelta(hours=1)) == 0
    assert ChecklistRun.objects.get().verification == "pending"
    # GPU 0 cooled by 7 °C at equal power, GPU 1 by only 1 °C.
    readings(
        g0,
        start=now + dt.timedelta(minutes=11),
        minutes=90,
        temperature_c=73,
        power_w=lambda n: 240 + n % 20,
        utilization_gpu_pct=95,
    )
    readings(g1, start=now + dt.timedelta(minutes=1), minutes=100, temperature_c=79, power_w=lambda n: 240 + n % 20,
             utilization_gpu_pct=95)  # fmt: skip
    assert services.verifications_finish(now=now + dt.timedelta(hours=3)) == 1
    run.refresh_from_db()
    assert run.verification == "done"
    item = items_of(run)["cooler_after"]
    assert item["outcome"] == "fail"
    per_gpu = {g["gpu"]: g for g in item["evidence"]["gpus"]}
    assert per_gpu["GPU 0"]["drop_c"] >= 6.5 and per_gpu["GPU 0"]["outcome"] == "pass"
    assert per_gpu["GPU 1"]["drop_c"] < 3 and per_gpu["GPU 1"]["outcome"] == "fail"
    assert per_gpu["GPU 0"]["bins"][0]["before_c"] > per_gpu["GPU 0"]["bins"][0]["after_c"]
    assert set(item["evidence"]["windows"]) == {"before", "after"}
    ticket = Ticket.objects.get(rule="checklist_failed")
    assert ticket.gpu == g1 and "Cooler at equal power" in ticket.title
    # Idempotent: nothing more to judge.
    assert services.verifications_finish(now=now + dt.timedelta(hours=4)) == 0


def test_cleaning_effect_gives_up_after_the_wait(technician, host):
    now = timezone.now()
    for gpu in host.gpus.all():
        readings(
            gpu, start=now - dt.timedelta(days=1), minutes=60, temperature_c=80, power_w=250, utilization_gpu_pct=95
        )
    run = services.run_start(template_key="cleaning", hostname="node-a", gpu_uuids=None, user=technician)
    services.run_answer(run=run, answers=CLEANING, user=technician)
    services.run_complete(run=run, signature="Bob", user=technician, now=now)
    assert services.verifications_finish(now=now + dt.timedelta(days=15)) == 1
    assert items_of(run)["cooler_after"]["outcome"] == "unknown"
    assert not Ticket.objects.filter(rule="checklist_failed").exists()


def test_the_beat_schedule_runs_the_verifications():
    entry = settings.CELERY_BEAT_SCHEDULE["checklists-verifications"]
    assert entry["task"] == "portal.checklists.tasks.verifications_finish_task"
    from portal.checklists.tasks import verifications_finish_task

    assert verifications_finish_task.name == entry["task"]
