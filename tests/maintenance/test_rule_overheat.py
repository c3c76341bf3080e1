"""Overheat: ≥ slowdown − 5 °C for 2 min opens; < slowdown − 12 °C for 10 min clears."""

from portal.maintenance.models import RuleState, Ticket
from tests.maintenance.helpers import feed, series


def test_fires_after_two_minutes_on_reading_time(gpu):
    rows = series([{"temperature_c": 86}] * 11)  # 100 s of readings: not yet
    feed(gpu, rows)
    assert not Ticket.objects.exists()
    assert RuleState.objects.get(key=f"overheat/gpu/{gpu.pk}").state == "pending"
    more = series([{"temperature_c": 87}] * 3, start=rows[-1][0] + (rows[1][0] - rows[0][0]))
    feed(gpu, more)
    ticket = Ticket.objects.get()
    assert ticket.rule == "overheat" and ticket.fingerprint == f"overheat/gpu/{gpu.pk}"
    assert ticket.peak_value == 87 and ticket.severity == "warning"
    assert ticket.evidence["readings"][-1][1] == 87


def test_does_not_fire_below_threshold(gpu):
    feed(gpu, series([{"temperature_c": 84}] * 200))
    assert not Ticket.objects.exists()


def test_unknown_threshold_uses_83(gpu):
    gpu.temp_slowdown_c = None
    gpu.save()
    feed(gpu, series([{"temperature_c": 83}] * 20))
    assert Ticket.objects.filter(rule="overheat").count() == 1


def test_oscillating_series_does_not_flap(gpu):
    # 86 / 80 alternating: opens once, never clears (80 is not below 78), so one ticket, one occurrence.
    rows = series([{"temperature_c": 86 if (i // 15) % 2 == 0 else 80} for i in range(600)])
    feed(gpu, rows)
    ticket = Ticket.objects.get()
    assert ticket.occurrences == 1 and ticket.state == "open"


def test_short_spikes_never_open(gpu):
    rows = series([{"temperature_c": 88 if i % 6 == 0 else 70} for i in range(600)])
    feed(gpu, rows)
    assert not Ticket.objects.exists()


def test_clears_after_ten_minutes_cool_and_reaching_slowdown_escalates(gpu):
    hot = series([{"temperature_c": 91}] * 20)
    feed(gpu, hot)
    ticket = Ticket.objects.get()
    assert ticket.severity == "critical"
    assert ticket.events.filter(kind="escalated").exists()
    cool = series([{"temperature_c": 70}] * 70, start=hot[-1][0] + (hot[1][0] - hot[0][0]))
    feed(gpu, cool)
    ticket.refresh_from_db()
    assert ticket.state == "resolved" and ticket.auto_resolved


def test_gap_restarts_the_pending_timer(gpu):
    import datetime as dt

    first = series([{"temperature_c": 88}] * 5)
    later = series([{"temperature_c": 88}] * 5, start=first[-1][0] + dt.timedelta(minutes=20))
    feed(gpu, first)
    feed(gpu, later)
    assert not Ticket.objects.exists()
