"""Ticket behaviour: dedupe, reopen, grouping, silences, auto-resolve, resolve by record, restarts,
and the ingest hook (the same batch twice changes nothing)."""

import datetime as dt
import json

import pytest
from django.db import transaction
from django.utils import timezone

from portal.fleet import services as fleet_services
from portal.fleet.models import Gpu, MaintenanceRecord
from portal.maintenance.models import Notification, RuleState, Silence, Subscription, Ticket
from portal.maintenance.rules.base import READING_COLUMNS
from portal.maintenance.services import beat
from portal.telemetry.models import StageDone
from tests.maintenance.helpers import T0, feed, rules_stage_run, series

HOT = {"temperature_c": 88}
COOL = {"temperature_c": 60}


def test_repeats_bump_the_open_ticket_instead_of_opening_another(gpu):
    rows = series([HOT] * 20 + [COOL] * 70 + [{"temperature_c": 89}] * 20)
    feed(gpu, rows[:20])
    ticket = Ticket.objects.get()
    ticket.state = "acknowledged"  # a person is on it: auto-resolve still applies, dedupe must hold
    ticket.save()
    feed(gpu, rows[20:])
    assert Ticket.objects.count() == 1
    ticket.refresh_from_db()
    assert ticket.occurrences == 2 and ticket.peak_value == 89 and ticket.state == "open"


def test_recurrence_within_24h_reopens_and_later_opens_new(gpu):
    feed(gpu, series([HOT] * 20 + [COOL] * 70))
    first = Ticket.objects.get()
    assert first.state == "resolved" and first.auto_resolved
    feed(gpu, series([HOT] * 20, start=T0 + dt.timedelta(hours=5)))
    first.refresh_from_db()
    assert Ticket.objects.count() == 1 and first.state == "open" and first.events.filter(kind="reopened").exists()
    feed(gpu, series([COOL] * 70, start=T0 + dt.timedelta(hours=6)))
    feed(gpu, series([HOT] * 20, start=T0 + dt.timedelta(hours=40)))
    assert Ticket.objects.count() == 2


def test_worker_restart_mid_pending_period_loses_nothing(gpu):
    """The pending timer lives in RuleState: a fresh process (nothing in memory) fires on time."""
    rows = series([HOT] * 14)
    feed(gpu, rows[:7])
    state = RuleState.objects.get(key=f"overheat/gpu/{gpu.pk}")
    assert state.state == "pending" and state.since_ts == T0
    # nothing but the database survives; evaluate the rest as a new worker would
    feed(gpu, rows[7:])
    assert Ticket.objects.filter(rule="overheat").count() == 1


def test_grouping_when_most_gpus_of_a_host_fire(host8):
    host, gpus = host8
    sub_user = _subscriber()
    rows = {g.pk: series([HOT] * 20) for g in gpus[:6]}
    with transaction.atomic():
        rules_stage_run(readings=rows)
    parent = Ticket.objects.get(gpu__isnull=True, rule="overheat")
    children = Ticket.objects.filter(gpu__isnull=False, rule="overheat")
    assert children.count() == 6 and all(c.parent_id == parent.pk for c in children)
    notified = set(Notification.objects.values_list("ticket_id", flat=True))
    assert notified == {parent.pk}, "only the host ticket notifies"
    assert sub_user


def test_two_gpus_of_eight_stay_separate(host8):
    host, gpus = host8
    with transaction.atomic():
        rules_stage_run(readings={g.pk: series([HOT] * 20) for g in gpus[:2]})
    assert not Ticket.objects.filter(gpu__isnull=True).exists()


def test_silenced_gpu_ticket_is_marked_and_sends_nothing(gpu, admin):
    _subscriber()
    Silence.objects.create(host=gpu.host, gpu=gpu, starts_at=T0 - dt.timedelta(hours=1),
                           ends_at=T0 + dt.timedelta(hours=1), comment="fan swap", created_by=admin)  # fmt: skip
    feed(gpu, series([HOT] * 20))
    assert Ticket.objects.get().silenced
    assert not Notification.objects.exists()


def test_gpu_out_for_repair_is_silenced_by_status(gpu):
    _subscriber()
    Gpu.objects.filter(pk=gpu.pk).update(status=Gpu.Status.OUT_FOR_REPAIR)
    feed(gpu, series([HOT] * 20))
    assert Ticket.objects.get().silenced and not Notification.objects.exists()


def test_cleaning_record_resolves_the_ticket_and_links_both_ways(gpu, technician):
    Ticket.objects.all().delete()
    feed(gpu, series([{"power_limit_w": 330.0}] * 40))  # not resolved by cleaning
    from portal.maintenance.services.tickets import ticket_fire

    dust, _ = ticket_fire(rule="cooling_degradation", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=20)
    defaults = {"rule": dust.rule, "host": gpu.host, "gpu": gpu, "state": "firing", "data": {"drift": {"base": [1]}}}
    RuleState.objects.update_or_create(key=dust.fingerprint, defaults=defaults)
    record = fleet_services.record_create(
        kind=MaintenanceRecord.Kind.CLEANING, host=gpu.host, gpu=gpu, recorded_by=technician,
        performed_at=timezone.now(), performed_by="Bob", dust_level="heavy",
    )  # fmt: skip
    dust.refresh_from_db()
    assert dust.state == "resolved" and dust.resolved_by_record == record and not dust.auto_resolved
    assert list(record.resolved_tickets.all()) == [dust]
    assert Ticket.objects.get(rule="overclock").state == "open"
    state = RuleState.objects.get(key=dust.fingerprint)
    assert state.state == "ok" and state.data == {}, "a cleaning resets the baseline"


def test_host_wide_record_counts_for_each_gpu(host8):
    host, gpus = host8
    from portal.maintenance.services.tickets import ticket_fire

    for g in gpus[:2]:
        ticket_fire(rule="pcie", host_id=host.pk, gpu_id=g.pk, at=timezone.now())
    fleet_services.record_create(
        kind=MaintenanceRecord.Kind.CONNECTION_CHECK, host=host, performed_at=timezone.now(), performed_by="x",
        cables_ok=True, risers_ok=True, power_ok=False,
    )  # fmt: skip
    assert set(Ticket.objects.values_list("state", flat=True)) == {"resolved"}


def test_silence_rule_fires_and_the_next_reading_resolves(host8):
    host, gpus = host8
    with transaction.atomic():
        rules_stage_run(readings={g.pk: series([COOL] * 3) for g in gpus})
    from portal.telemetry.models import GpuLatest

    GpuLatest.objects.bulk_create([GpuLatest(gpu=g, ts=T0, received_at=T0) for g in gpus])
    beat.agent_silent_check(now=T0 + dt.timedelta(minutes=4))
    assert not Ticket.objects.exists()
    beat.agent_silent_check(now=T0 + dt.timedelta(minutes=6))
    host_ticket = Ticket.objects.get(rule="agent_silent", gpu__isnull=True)
    assert Ticket.objects.filter(rule="agent_silent", parent=host_ticket).count() == 8
    beat.agent_silent_check(now=T0 + dt.timedelta(minutes=8))  # idempotent
    assert Ticket.objects.filter(rule="agent_silent").count() == 9
    with transaction.atomic():
        rules_stage_run(readings={g.pk: series([COOL], start=T0 + dt.timedelta(minutes=9))
                                                     for g in gpus})  # fmt: skip
    assert set(Ticket.objects.filter(rule="agent_silent").values_list("state", flat=True)) == {"resolved"}


def test_an_agent_delivering_its_spool_after_an_outage_is_not_silent(host8):
    host, gpus = host8
    from portal.telemetry.models import GpuLatest

    # The newest reading is an hour old, but it arrived a few seconds ago: a backlog coming in.
    received = T0 + dt.timedelta(hours=1)
    GpuLatest.objects.bulk_create([GpuLatest(gpu=g, ts=T0, received_at=received) for g in gpus])
    beat.agent_silent_check(now=received + dt.timedelta(seconds=20))
    assert not Ticket.objects.exists()
    beat.agent_silent_check(now=received + dt.timedelta(minutes=6))  # and then nothing more came
    assert Ticket.objects.filter(rule="agent_silent", gpu__isnull=True).count() == 1


def test_a_late_backlog_never_resolves_a_ticket_before_it_opened(host8):
    host, gpus = host8
    from portal.telemetry.models import GpuLatest

    GpuLatest.objects.bulk_create([GpuLatest(gpu=g, ts=T0, received_at=T0) for g in gpus])
    opened = T0 + dt.timedelta(minutes=30)
    beat.agent_silent_check(now=opened)  # the portal heard nothing for half an hour
    # then the agent's spool arrives: readings from a minute after the last one
    with transaction.atomic():
        rules_stage_run(readings={g.pk: series([COOL], start=T0 + dt.timedelta(minutes=1))
                                                     for g in gpus})  # fmt: skip
    tickets = Ticket.objects.filter(rule="agent_silent")
    assert tickets.count() == 9 and {t.state for t in tickets} == {"resolved"}
    assert all(t.resolved_at >= t.first_seen for t in tickets)


def test_schedules_due_then_overdue_then_resolved_by_record(gpu):
    host = gpu.host
    now = timezone.now()
    type(host).objects.filter(pk=host.pk).update(created_at=now - dt.timedelta(days=6, hours=12))
    beat.schedules_check(now=now)
    backup = Ticket.objects.get(rule="schedule_backup")
    assert backup.severity == "info"
    beat.schedules_check(now=now + dt.timedelta(days=1))
    backup.refresh_from_db()
    assert backup.severity == "warning" and backup.events.filter(kind="escalated").exists()
    fleet_services.record_create(
        kind=MaintenanceRecord.Kind.BACKUP, host=host, performed_at=now, performed_by="x",
        backup_content="checkpoints", destination="nas", verified=True,
    )  # fmt: skip
    backup.refresh_from_db()
    assert backup.state == "resolved" and backup.resolved_by_record is not None
    beat.schedules_check(now=now + dt.timedelta(days=1, hours=1))
    assert Ticket.objects.filter(rule="schedule_backup").count() == 1


def _subscriber():
    from tests.factories import UserFactory

    user = UserFactory(username="oncall")
    Subscription.objects.create(user=user, channel="email", target="oncall@example.com", min_severity="info")
    return user


# --- through ingest and the hook ------------------------------------------------------------


UUID = "GPU-00000001-6b9b-4b4e-9d0a-6f1c1a2b3c4d"


@pytest.fixture
def ingest(db):
    from portal.telemetry.schemas import BatchIn
    from portal.telemetry.services.ingest import reading_batch_ingest
    from portal.telemetry.services.tokens import host_token_issue
    from tests.telemetry.batches import make_batch, make_reading

    host = host_token_issue(hostname="dgx-07", label="t", create_host=True).record.host

    def send(readings_overrides, now):
        batch = make_batch("dgx-07", readings=0, now=now)
        last = len(readings_overrides) - 1
        batch["readings"] = [
            make_reading(UUID, now - dt.timedelta(seconds=10 * (last - i)), **o)
            for i, o in enumerate(readings_overrides)
        ]
        batch["gpus"] = [dict(batch["gpus"][0], uuid=UUID)]
        return reading_batch_ingest(host=host, batch=BatchIn.model_validate_json(json.dumps(batch)), now=now)

    return send


def test_ingest_hook_evaluates_and_the_same_batch_twice_changes_nothing(ingest, django_capture_on_commit_callbacks):
    from portal.telemetry.pipeline import pipeline_run

    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        result = ingest([{"temperature_c": 89}] * 20, now)
    ticket = Ticket.objects.get(rule="overheat")
    assert StageDone.objects.filter(stage="rules", batch_pk=result.batch_pk).exists()
    before = (ticket.occurrences, RuleState.objects.count(), Ticket.objects.count())
    assert pipeline_run().batches == []  # judged once: nothing waits
    ticket.refresh_from_db()
    assert (ticket.occurrences, RuleState.objects.count(), Ticket.objects.count()) == before


def test_reading_columns_exist_on_the_model():
    from portal.telemetry.models import Reading

    names = {f.name for f in Reading._meta.get_fields()}
    assert set(READING_COLUMNS) <= names


def test_a_record_added_on_the_admin_site_resolves_the_ticket_it_answers(gpu, admin, client_for):
    """The admin site writes records without fleet's services; fleet's record_saved hook still tells
    maintenance, as the record services do."""
    from portal.maintenance.services.tickets import ticket_fire

    dust, _ = ticket_fire(rule="cooling_degradation", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=20)
    client = client_for(admin)
    form = client.get("/admin/fleet/maintenancerecord/add/").context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    now = timezone.localtime()
    data.update(
        kind="cleaning", host=gpu.host.pk, gpu=gpu.pk, performed_by="Bob", dust_level="heavy",
        performed_at_0=now.strftime("%Y-%m-%d"), performed_at_1=now.strftime("%H:%M:%S"),
        **{f"attachments-{key}": value for key, value in
           {"TOTAL_FORMS": 0, "INITIAL_FORMS": 0, "MIN_NUM_FORMS": 0, "MAX_NUM_FORMS": 1000}.items()},
    )  # fmt: skip
    answer = client.post("/admin/fleet/maintenancerecord/add/", data)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    record = MaintenanceRecord.objects.get(kind="cleaning", gpu=gpu)
    dust.refresh_from_db()
    assert dust.state == "resolved" and dust.resolved_by_record == record
