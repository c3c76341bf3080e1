"""Usage-based schedules: "clean every 90 days or every 1,500 busy hours, whichever comes first",
"inspect fans every 2,000 fan-high hours", "connection check after every 500 thermal cycles";
per rule and per host; the ticket names the meter and how far past it is."""

import datetime as dt

import pytest
from django.utils import timezone

from portal.fleet import services as fleet_services
from portal.fleet.models import MaintenanceRecord
from portal.maintenance.models import Ticket
from portal.maintenance.services import beat
from portal.maintenance.services.config import rule_config_set
from portal.wear.models import WearHour
from portal.wear.services import wear_days_refresh
from tests.factories import GpuFactory

NOW = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)


def hours(gpu, n, *, start, busy=0.0, fan=0.0, cycles_per_hour=0):
    WearHour.objects.bulk_create(
        WearHour(gpu=gpu, hour=start + dt.timedelta(hours=i), powered_s=3600, busy_s=busy, fan_high_s=fan,
                 cycles_total=(i + 1) * cycles_per_hour)
        for i in range(n)
    )  # fmt: skip
    first = int(start.timestamp()) // 86400 * 86400
    wear_days_refresh({gpu.pk: {first + 86400 * d for d in range(n // 24 + 2)}})


@pytest.fixture
def fresh_gpu(db):
    gpu = GpuFactory()
    # a recent host: the calendar is far from due
    type(gpu.host).objects.filter(pk=gpu.host.pk).update(created_at=NOW - dt.timedelta(days=10))
    return gpu


@pytest.mark.django_db
def test_busy_hours_make_cleaning_due_before_the_calendar(fresh_gpu):
    hours(fresh_gpu, 240, start=NOW - dt.timedelta(days=10), busy=3600 * 0.7)  # 168 busy hours
    beat.schedules_check(now=NOW)
    assert not Ticket.objects.filter(rule="schedule_cleaning").exists()
    rule_config_set(rule="schedule_cleaning", params={"busy_hours": 150}, host=fresh_gpu.host)  # per host
    beat.schedules_check(now=NOW)
    ticket = Ticket.objects.get(rule="schedule_cleaning")
    assert ticket.severity == "warning"
    event_notes = " ".join(ticket.events.values_list("note", flat=True))
    assert "busy hours: 168" in event_notes and "every 150: 18 past" in event_notes, event_notes


@pytest.mark.django_db
def test_fan_high_hours_make_a_fan_inspection_due_and_an_inspection_resolves_it(fresh_gpu):
    hours(fresh_gpu, 230, start=NOW - dt.timedelta(days=10), fan=3600)
    rule_config_set(rule="schedule_fan_inspection", params={"fan_high_hours": 200})
    beat.schedules_check(now=NOW)
    ticket = Ticket.objects.get(rule="schedule_fan_inspection")
    assert "fan-high hours: 230" in " ".join(ticket.events.values_list("note", flat=True))
    fleet_services.record_create(kind=MaintenanceRecord.Kind.INSPECTION, host=fresh_gpu.host, performed_at=NOW,
                                 performed_by="x", passed=True)  # fmt: skip
    ticket.refresh_from_db()
    assert ticket.state == "resolved"
    beat.schedules_check(now=NOW + dt.timedelta(hours=1))  # counted again from the inspection: not due
    assert Ticket.objects.filter(rule="schedule_fan_inspection").count() == 1


@pytest.mark.django_db
def test_thermal_cycles_make_a_connection_check_due(fresh_gpu):
    hours(fresh_gpu, 200, start=NOW - dt.timedelta(days=9), cycles_per_hour=3)
    beat.schedules_check(now=NOW)
    ticket = Ticket.objects.get(rule="schedule_connection_check")
    notes = " ".join(ticket.events.values_list("note", flat=True))
    assert "thermal cycles: 597" in notes and "every 500: 97 past" in notes, notes


@pytest.mark.django_db
def test_a_meter_set_to_none_is_off(fresh_gpu):
    hours(fresh_gpu, 200, start=NOW - dt.timedelta(days=9), cycles_per_hour=3)
    rule_config_set(rule="schedule_connection_check", params={"thermal_cycles": None})
    beat.schedules_check(now=NOW)
    assert not Ticket.objects.filter(rule="schedule_connection_check").exists()


@pytest.mark.django_db
def test_a_negative_meter_setting_is_refused(fresh_gpu):
    from portal.core.errors import InvalidInput

    with pytest.raises(InvalidInput):
        rule_config_set(rule="schedule_cleaning", params={"busy_hours": -1})
    assert timezone.now()
