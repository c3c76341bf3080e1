"""The maintenance windows' part of the demo story: next week's planned downtime on dgx-02, with
the checklist its technician will work through (a driver update). Called by the demo command once
the fleet exists; does nothing when windows already exist."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.utils import timezone

from portal.fleet.models import Host
from portal.windows import services
from portal.windows.models import MaintenanceWindow

TITLE = "Driver update and dust check on dgx-02"
NOTES = "Drain ahead of time; update the driver to the validated release, then blow out the intake filters."


def demo_windows_seed(*, username: str = "tech", now: dt.datetime | None = None) -> int:
    """Returns the number of windows created (0 when the demo has some already, or lacks dgx-02)."""
    user = get_user_model().objects.filter(username=username).first()
    if user is None or MaintenanceWindow.objects.exists() or not Host.objects.filter(hostname="dgx-02").exists():
        return 0
    now = now or timezone.now()
    # Next week, Tuesday 09:00 UTC, for four hours.
    start = (now + dt.timedelta(days=7 - now.weekday() + 1)).replace(hour=9, minute=0, second=0, microsecond=0)
    services.window_create(
        title=TITLE, starts_at=start, ends_at=start + dt.timedelta(hours=4), hostnames=["dgx-02"],
        checklist="driver_update", notes=NOTES, user=user, now=now,
    )  # fmt: skip
    return 1
