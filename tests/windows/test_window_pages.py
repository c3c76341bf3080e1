"""The windows pages (list and form, one window), the fleet and host pages' panel, and the
iCalendar feed read back with the `icalendar` package's parser."""

import datetime as dt
import re

import icalendar
import pytest
from django.utils import timezone, translation

from portal.accounts.services import api_token_issue
from portal.windows import services
from portal.windows.models import MaintenanceWindow
from tests.windows.conftest import later

pytestmark = pytest.mark.django_db

NASTY = 'Fans, filters; "rack 4"\nthen\\BIOS <b>bold</b> & co'


def _form(**overrides):
    start = timezone.localtime(later(days=3)).replace(second=0, microsecond=0)
    data = {"title": "Fans", "starts_at": start.strftime("%Y-%m-%dT%H:%M"),
            "ends_at": (start + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"), "hosts": "dgx-01, dgx-02",
            "checklist": "cleaning", "notes": ""}  # fmt: skip
    data.update(overrides)
    return data


def _error_of(content: bytes, field: str) -> str:
    match = re.search(rf'id="id_{field}_error">([^<]*)<', content.decode())
    return match.group(1) if match else ""


def test_a_technician_plans_a_window_on_the_page(client_for, technician, hosts):
    client = client_for(technician)
    page = client.get("/maintenance-windows/")
    assert page.status_code == 200 and b'id="window-form"' in page.content
    answer = client.post("/maintenance-windows/", _form())
    window = MaintenanceWindow.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/maintenance-windows/{window.pk}/"
    assert [h.hostname for h in window.hosts.order_by("hostname")] == ["dgx-01", "dgx-02"]
    detail = client.get(answer["Location"])
    assert detail.status_code == 200 and b"dgx-02" in detail.content and b'id="window-complete"' in detail.content
    listed = client.get("/maintenance-windows/")
    assert b"Fans" in listed.content


@pytest.mark.parametrize(
    ("overrides", "field", "status"),
    [
        ({"hosts": "dgx-01 nowhere"}, "hosts", 400),
        ({"hosts": ""}, "hosts", 400),
        ({"title": ""}, "title", 400),
        ({"starts_at": "2026-13-45T99:00"}, "starts_at", 400),
        ({"ends_at": _form()["starts_at"]}, "ends_at", 400),
        ({"checklist": "no-such"}, "checklist", 400),
    ],
)
def test_bad_input_is_shown_by_its_field(client_for, technician, hosts, overrides, field, status):
    answer = client_for(technician).post("/maintenance-windows/", _form(**overrides))
    assert answer.status_code == status
    assert _error_of(answer.content, field), answer.content.decode()[-3000:]
    assert not MaintenanceWindow.objects.exists()


def test_an_overlap_is_a_409_shown_by_the_hosts_field(client_for, technician, hosts):
    client = client_for(technician)
    client.post("/maintenance-windows/", _form())
    answer = client.post("/maintenance-windows/", _form(hosts="dgx-02"))
    assert answer.status_code == 409 and "dgx-02" in _error_of(answer.content, "hosts")
    assert MaintenanceWindow.objects.count() == 1


def test_a_viewer_reads_but_plans_nothing(client_for, viewer, technician, hosts):
    window = services.window_create(title="Fans", starts_at=later(days=1), ends_at=later(days=1, hours=1),
                                    hostnames=["dgx-01"], user=technician)  # fmt: skip
    client = client_for(viewer)
    page = client.get("/maintenance-windows/")
    assert page.status_code == 200 and b"window-form" not in page.content
    assert client.post("/maintenance-windows/", _form()).status_code == 403
    assert b"window-complete" not in client.get(f"/maintenance-windows/{window.pk}/").content
    assert client.post(f"/maintenance-windows/{window.pk}/complete/").status_code == 403
    assert client_for(None).get("/maintenance-windows/").status_code == 302  # to the login page


def test_the_page_completes_and_says_a_second_time_is_refused(client_for, technician, hosts):
    window = services.window_create(title="Fans", starts_at=later(days=1), ends_at=later(days=1, hours=1),
                                    hostnames=["dgx-01"], user=technician)  # fmt: skip
    client = client_for(technician)
    assert client.post(f"/maintenance-windows/{window.pk}/complete/").status_code == 302
    window.refresh_from_db()
    assert window.state == "completed"
    again = client.post(f"/maintenance-windows/{window.pk}/cancel/", follow=True)
    assert b"The window is Completed." in again.content
    assert client.post(f"/maintenance-windows/{window.pk}/explode/").status_code == 404


def test_the_fleet_and_host_pages_show_scheduled_and_active_windows(client_for, viewer, technician, hosts):
    services.window_create(title=NASTY, starts_at=later(days=1), ends_at=later(days=1, hours=1),
                           hostnames=["dgx-02"], user=technician)  # fmt: skip
    ended = services.window_create(title="Old one", starts_at=later(days=2), ends_at=later(days=2, hours=1),
                                   hostnames=["dgx-02"], user=technician)  # fmt: skip
    services.window_cancel(window=ended, user=technician)
    client = client_for(viewer)
    fleet = client.get("/").content.decode()
    assert 'id="maintenance-windows"' in fleet and "&lt;b&gt;bold&lt;/b&gt;" in fleet and "<b>bold</b>" not in fleet
    assert "Old one" not in fleet
    host = client.get("/hosts/dgx-02/").content.decode()
    assert 'id="maintenance-windows"' in host
    assert 'id="maintenance-windows"' not in client.get("/hosts/dgx-01/").content.decode()
    with translation.override("zh-hans"):
        chinese = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "维护窗口" in chinese


def test_the_calendar_feed_parses_and_every_text_round_trips(client_for, viewer, technician, hosts):
    window = services.window_create(title=NASTY, starts_at=later(days=1), ends_at=later(days=1, hours=3),
                                    hostnames=["dgx-01", "dgx-02"], checklist="cleaning", notes="a;b,c\nd\\e",
                                    user=technician)  # fmt: skip
    answer = client_for(viewer).get("/maintenance-windows.ics")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/calendar")
    raw = answer.content
    assert all(len(line) <= 75 for line in raw.split(b"\r\n")), "lines are folded at 75 octets"
    calendar = icalendar.Calendar.from_ical(raw)
    assert calendar["VERSION"] == "2.0" and calendar["PRODID"]
    events = calendar.walk("VEVENT")
    assert len(events) == 1
    event = events[0]
    assert str(event["SUMMARY"]) == NASTY
    assert str(event["LOCATION"]) == "dgx-01, dgx-02"
    assert "a;b,c\nd\\e" in str(event["DESCRIPTION"])
    assert event.decoded("DTSTART") == window.starts_at.replace(microsecond=0)
    assert event.decoded("DTEND") == window.ends_at.replace(microsecond=0)
    assert str(event["UID"]).startswith(f"maintenance-window-{window.pk}@") and str(event["STATUS"]) == "CONFIRMED"
    # The raw text escapes what RFC 5545 says (a newline is never a raw line break inside a value).
    unfolded = raw.replace(b"\r\n ", b"")
    assert b'SUMMARY:Fans\\, filters\\; "rack 4"\\nthen\\\\BIOS' in unfolded


def test_the_calendar_feed_takes_a_personal_token_and_refuses_others(client_for, viewer, outsider, hosts):
    anonymous = client_for(None)
    assert anonymous.get("/maintenance-windows.ics").status_code == 401
    assert anonymous.get("/maintenance-windows.ics?token=gfp_nonsense").status_code == 401
    token, _row = api_token_issue(user=viewer, label="calendar")
    answer = anonymous.get(f"/maintenance-windows.ics?token={token}")
    assert answer.status_code == 200 and b"BEGIN:VCALENDAR" in answer.content
    assert client_for(outsider).get("/maintenance-windows.ics").status_code == 403
    assert anonymous.post(f"/maintenance-windows.ics?token={token}").status_code == 405


def test_a_shipped_checklist_is_named_in_the_readers_language(client_for, technician, hosts):
    client = client_for(technician)
    assert client.post("/maintenance-windows/", _form()).status_code == 302
    window = MaintenanceWindow.objects.get()
    client.cookies["django_language"] = "zh-hans"
    for url in ("/maintenance-windows/", f"/maintenance-windows/{window.pk}/"):
        page = client.get(url).content.decode()
        assert "散热与清灰除尘" in page, url  # "Cooling and dust cleaning": the list, the form's choice, the window
        assert "Cooling and dust cleaning" not in page, url
