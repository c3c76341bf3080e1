"""The maintenance windows as an iCalendar document (RFC 5545), for Thunderbird, Google Calendar
and the like. Built with the `icalendar` package, which escapes every text value (backslash,
semicolon, comma, newline) and folds long lines: a title is data, whatever it holds."""

from __future__ import annotations

import datetime as dt

import icalendar
from django.utils import timezone

from portal.windows.models import MaintenanceWindow

PRODID = "-//GPU Fleet Portal//Maintenance windows//EN"
STATUS = {
    MaintenanceWindow.State.SCHEDULED: "CONFIRMED",
    MaintenanceWindow.State.ACTIVE: "CONFIRMED",
    MaintenanceWindow.State.COMPLETED: "CONFIRMED",
    MaintenanceWindow.State.CANCELLED: "CANCELLED",
}


def calendar_document(*, windows, base_url: str, domain: str, now: dt.datetime | None = None) -> bytes:
    """`windows` shaped by `selectors.windows_for_feed`; `base_url` the portal's (links), `domain`
    the UIDs' right-hand side (stable across requests)."""
    now = now or timezone.now()
    calendar = icalendar.Calendar()
    calendar.add("prodid", PRODID)
    calendar.add("version", "2.0")
    calendar.add("calscale", "GREGORIAN")
    calendar.add("method", "PUBLISH")
    calendar.add("x-wr-calname", "GPU fleet maintenance windows")
    for window in windows:
        hosts = [row.host.hostname for row in window.rows]
        event = icalendar.Event()
        event.add("uid", f"maintenance-window-{window.pk}@{domain}")
        event.add("dtstamp", now.astimezone(dt.UTC))
        event.add("dtstart", window.starts_at.astimezone(dt.UTC))
        event.add("dtend", window.ends_at.astimezone(dt.UTC))
        event.add("summary", window.title)
        event.add("location", ", ".join(hosts))
        lines = [f"Hosts: {', '.join(hosts)}", f"State: {window.state}"]
        if window.checklist is not None:
            lines.append(f"Checklist: {window.checklist.name} ({window.checklist.key})")
        if window.notes:
            lines += ["", window.notes]
        event.add("description", "\n".join(lines))
        event.add("status", STATUS[window.state])
        event.add("categories", ["Maintenance"])
        event.add("url", f"{base_url}/maintenance-windows/{window.pk}/")
        event.add("last-modified", (window.ended_at or window.started_at or window.created_at).astimezone(dt.UTC))
        event.add("sequence", {"scheduled": 0, "active": 1}.get(window.state, 2))
        calendar.add_component(event)
    return calendar.to_ical()
