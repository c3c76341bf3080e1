"""`manage.py seed_demo` makes a small demo fleet and users, and running it again changes nothing."""

import io
import re

import pytest
from auditlog.models import LogEntry
from django.contrib.auth import get_user_model
from django.core.management import call_command

from portal.fleet.models import Attachment, Gpu, Host, MaintenanceRecord

pytestmark = pytest.mark.django_db


def seed():
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def credentials(output):
    return dict(re.findall(r"^  (\w+)\s+(\S+)$", output, re.M))


def counts():
    models = (Host, Gpu, MaintenanceRecord, Attachment, get_user_model(), LogEntry)
    return {model.__name__: model.objects.count() for model in models}


def test_seed_demo_is_idempotent(settings, tmp_path, client):
    settings.VAR_DIR = tmp_path
    first_output = seed()
    first = counts()
    assert first["Host"] == 3 and first["Gpu"] == 12 and first["MaintenanceRecord"] >= 15
    creds = credentials(first_output)
    assert set(creds) == {"admin", "tech", "viewer"}
    assert "3 host(s) created" in first_output

    second_output = seed()
    assert counts() == first
    assert credentials(second_output) == creds
    assert "0 host(s) created, 3 in all" in second_output

    for username, password in creds.items():
        assert client.login(username=username, password=password), username
    user_model = get_user_model()
    assert list(user_model.objects.get(username="tech").groups.values_list("name", flat=True)) == ["technician"]


def test_seed_demo_keeps_changed_passwords_in_sync(settings, tmp_path, client):
    """If someone changed a demo password, the next run puts back the one it prints."""
    settings.VAR_DIR = tmp_path
    creds = credentials(seed())
    user = get_user_model().objects.get(username="viewer")
    user.set_password("something else entirely")
    user.save()
    assert credentials(seed()) == creds
    assert client.login(username="viewer", password=creds["viewer"])
