"""The ticket page says what to do in words that work: the agent's real unit name, a unit on the
agent-silent peak, and rule descriptions whose `code` spans show as code, never as raw backticks
(and never as markup)."""

import datetime as dt
import importlib
import json
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.test import override_settings
from django.urls import reverse
from django.utils import translation

from agents.cli import SERVICE_NAME
from portal.core.templatetags.portal import code_spans
from portal.maintenance.models import Ticket
from portal.maintenance.rules import RULES
from portal.maintenance.services import beat
from portal.telemetry.models import GpuLatest
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_ticket():
    host = HostFactory(hostname="quiet-01")
    gpu = GpuFactory(host=host, index=0)
    GpuFactory(host=host, index=1)  # the other GPU keeps talking: a GPU ticket, no host ticket
    GpuLatest.objects.create(gpu=gpu, ts=T0, received_at=T0)
    GpuLatest.objects.create(gpu=host.gpus.get(index=1), ts=T0 + dt.timedelta(minutes=6),
                             received_at=T0 + dt.timedelta(minutes=6))  # fmt: skip
    beat.agent_silent_check(now=T0 + dt.timedelta(minutes=6))
    return Ticket.objects.get(rule="agent_silent", gpu=gpu)


def test_agent_silent_names_the_unit_the_installer_writes(silent_ticket, client_for, viewer):
    assert list((REPO / "agents").glob("*.service")) == []  # one unit: the one install-service writes
    page = client_for(viewer).get(silent_ticket.get_absolute_url()).content.decode()
    assert f"systemctl status {SERVICE_NAME}.service)" in page
    assert "gpu-agent.service" not in page and "gpu-fleet-agent)" not in page


@pytest.mark.parametrize("stored", ["systemctl status gpu-agent.service)", "systemctl status gpu-fleet-agent)"])
def test_stored_agent_silent_actions_are_brought_to_the_unit_and_translated_again(
    silent_ticket, client_for, viewer, stored
):
    # As releases before 0008 stored them (text only): shown as stored English, even to a Chinese reader.
    older = silent_ticket.action.replace(f"systemctl status {SERVICE_NAME}.service)", stored)
    assert older != silent_ticket.action
    Ticket.objects.filter(pk=silent_ticket.pk).update(action=older, action_msg=None)
    silent_ticket.refresh_from_db()
    with translation.override("zh-hans"):
        assert silent_ticket.action_shown == older
    for name in ("0008_agent_silent_unit_gpu_fleet_agent", "0009_messages"):
        importlib.import_module(f"portal.maintenance.migrations.{name}").forwards(django_apps, None)
    silent_ticket.refresh_from_db()
    assert f"systemctl status {SERVICE_NAME}.service)" in silent_ticket.action and stored not in silent_ticket.action
    assert silent_ticket.action_msg == {"id": "maintenance.action", "params": {"action": "agent_silent"}}
    with translation.override("zh-hans"):  # the rule's words, translated
        assert silent_ticket.action_shown == RULES["agent_silent"].action_shown
        assert f"{SERVICE_NAME}.service" in silent_ticket.action_shown


def test_agent_silent_peak_has_a_unit(silent_ticket, client_for, viewer):
    assert silent_ticket.unit == "s" and silent_ticket.peak_value == 360
    page = client_for(viewer).get(silent_ticket.get_absolute_url()).content.decode()
    assert '<dd class="ticket-peak">silent for 6 min</dd>' in page and "360 s" not in page


def test_rule_descriptions_show_code_not_backticks(silent_ticket, client_for, viewer, admin):
    # The ticket page speaks the reader's language: no settings' names (the rules page, where admins
    # set them, names them as code).
    what_to_do = client_for(viewer).get(silent_ticket.get_absolute_url()).content.decode()
    what_to_do = what_to_do.split("What to do", 1)[1].split("</section>")[0]
    assert "silent_after_s" not in what_to_do and "`" not in what_to_do and "5 minutes" in what_to_do
    rules = client_for(admin).get(reverse("maintenance:rules"))
    assert rules.status_code == 200 and "`" not in rules.content.decode()
    assert "<code>silent_after_s</code>" in rules.content.decode()


def test_code_spans_escape_before_marking_code():
    assert code_spans("set `a<b>` & <i>x</i>") == "set <code>a&lt;b&gt;</code> &amp; &lt;i&gt;x&lt;/i&gt;"
    assert code_spans("no spans") == "no spans"


@pytest.mark.parametrize("zone, wall", [("UTC", "2026-03-01 12:00:00"), ("Asia/Shanghai", "2026-03-01 20:00:00")])
def test_the_evidence_names_the_time_zone_its_times_are_in(client_for, viewer, zone, wall):
    """The readings that fired a ticket, and its evidence chart, in the portal's time zone, which the
    table's header names (it said "UTC" whatever the zone)."""
    gpu = GpuFactory()
    GpuLatest.objects.create(gpu=gpu, ts=T0, received_at=T0)
    ticket = Ticket.objects.create(
        fingerprint="overheat:z", rule="overheat", host=gpu.host, gpu=gpu, title="Hot", severity="warning",
        first_seen=T0, last_seen=T0, evidence={"readings": [[T0.timestamp(), 91]]},
    )  # fmt: skip
    with override_settings(TIME_ZONE=zone):
        response = client_for(viewer).get(ticket.get_absolute_url())
    page = response.content.decode()
    assert f"<th>Time ({zone})</th>" in page
    assert f'<td class="evidence-ts nowrap">{wall}</td>' in page
    figure = json.loads(response.context["chart"])
    assert figure["layout"]["shapes"][0]["x0"] == wall.replace(" ", "T")
