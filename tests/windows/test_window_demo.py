"""The demo's maintenance window: next week on dgx-02, with its checklist, once."""

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.utils import timezone

from portal.demo.windows import demo_windows_seed
from portal.windows.models import MaintenanceWindow

pytestmark = pytest.mark.django_db


def test_demo_window(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", stdout=io.StringIO())
    now = timezone.now()
    assert demo_windows_seed(now=now) == 1
    window = MaintenanceWindow.objects.get()
    assert window.state == "scheduled" and window.checklist.key == "driver_update"
    assert [h.hostname for h in window.hosts.all()] == ["dgx-02"]
    next_monday = (now + dt.timedelta(days=7 - now.weekday())).date()
    assert next_monday <= window.starts_at.date() < next_monday + dt.timedelta(days=7)
    assert window.ends_at - window.starts_at == dt.timedelta(hours=4)
    assert demo_windows_seed(now=now) == 0  # once
