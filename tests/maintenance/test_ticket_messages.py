"""Tickets store their title, action and notes as messages (an id with parameters) beside the
English text the API returns, and the pages render the message in the reader's language: a
rewording of a message changes what every stored row shows, in English and in translation, and
leaves the stored English (the API's) as it was."""

import datetime as dt
import importlib
import shutil
import subprocess
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.conf import settings as django_settings
from django.utils import translation

from portal.core import messages
from portal.maintenance import messages as msg
from portal.maintenance.models import Ticket, TicketEvent
from portal.maintenance.rules import RULES
from portal.maintenance.services.tickets import ticket_auto_resolve, ticket_fire, ticket_update
from tests.factories import GpuFactory, HostFactory
from tests.migrations import migrate_to, migrate_to_newest

pytestmark = pytest.mark.django_db
CATALOGUE = Path(django_settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
REWORDED = "the clear condition held for its whole period"


@pytest.fixture
def chinese_catalogue(tmp_path, settings):
    """The Chinese catalogue compiled into a scratch LOCALE_PATHS, with the translation of the
    reworded message added as a translator would add it."""
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (gettext) is not installed")
    target = tmp_path / "zh_Hans" / "LC_MESSAGES"
    target.mkdir(parents=True)
    po = target / "django.po"
    po.write_text(CATALOGUE.read_text() + f'\nmsgid "{REWORDED}"\nmsgstr "清除条件在整个期间都成立"\n')
    subprocess.run(["msgfmt", "-o", str(target / "django.mo"), str(po)], check=True)
    settings.LOCALE_PATHS = [tmp_path]
    yield
    translation.activate(settings.LANGUAGE_CODE)


@pytest.fixture
def gpu():
    return GpuFactory(host=HostFactory(hostname="dgx-07"), index=2)


def test_the_rule_and_service_notes_are_stored_as_messages_beside_their_english(gpu):
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=90.0)
    ticket_update(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=95.0, severity="critical")
    ticket_auto_resolve(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0 + dt.timedelta(hours=1))
    ticket.refresh_from_db()
    assert ticket.title == "GPU overheating: GPU 2 on dgx-07"
    assert ticket.title_msg == {"id": "maintenance.title", "params": {
        "problem": "overheat", "subject": {"id": "maintenance.subject.gpu", "params": {"index": 2, "host": "dgx-07"}},
    }}  # fmt: skip
    notes = list(ticket.events.exclude(note="").values_list("note", "note_msg"))
    assert notes[:2] == [
        ("warning → critical", msg.ESCALATED(before="warning", after="critical").stored()),
        ("the clear condition held", msg.CLEARED().stored()),
    ]  # fmt: skip
    assert notes[2][1]["id"] == "diagnostics.note.gate_requested"  # a critical ticket resolved: its GPU waits
    assert all(messages.english(stored) == note for note, stored in notes)


def test_a_reworded_message_shows_the_new_words_and_their_translation_on_rows_stored_before(
    gpu, chinese_catalogue, monkeypatch
):
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=90.0)
    ticket_auto_resolve(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0 + dt.timedelta(hours=1))
    event = TicketEvent.objects.get(ticket=ticket, kind=TicketEvent.Kind.AUTO_RESOLVED)
    with translation.override("zh-hans"):
        before = event.note_shown
    assert before not in ("the clear condition held", "")  # translated

    # The developers reword the message (same id) and the translators translate the new words.
    reworded = messages.Message(msg.CLEARED.id, REWORDED)
    monkeypatch.setitem(messages._CATALOGUE, msg.CLEARED.id, reworded)
    event.refresh_from_db()
    assert event.note == "the clear condition held", "the stored English (the API's) is as it was written"
    with translation.override("en"):
        assert event.note_shown == REWORDED
    with translation.override("zh-hans"):
        assert event.note_shown == "清除条件在整个期间都成立"
        assert Ticket.objects.get(pk=ticket.pk).title_shown == "GPU 过热：dgx-07 上的 GPU 2"


def test_a_persons_note_is_shown_as_typed(gpu, chinese_catalogue):
    ticket, _ = ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, value=90.0)
    event = TicketEvent.objects.create(ticket=ticket, kind="state", at=T0, note="unassigned")  # typed, not the portal's
    with translation.override("zh-hans"):
        assert event.note_shown == "unassigned"


def test_the_migration_reads_the_english_stored_before_once(gpu):
    migration = importlib.import_module("portal.maintenance.migrations.0009_messages")
    ticket, _ = ticket_fire(rule="checklist_failed", host_id=gpu.host_id, gpu_id=gpu.pk, at=T0, note="")
    checklist_note = "Fans respond failed in checklist run #12 (Before a long training run) (/checklists/runs/12/)"
    Ticket.objects.filter(pk=ticket.pk).update(
        title="Fans respond failed: GPU 2 on dgx-07", title_msg=None,
        action=f"{ticket.action}\n\n{checklist_note}", action_msg=None,
    )  # fmt: skip
    written = {
        "overdue: busy hours: 1,620 since the last cleaning (2026-01-02), every 1,500: 120 past": (
            msg.OVERDUE(note=msg.SCHEDULE_METER(
                meter="busy_hours", counted="1,620", kind="cleaning", date="2026-01-02", limit="1,500", past="120"))
        ),
        "last connection check: 2026-05-08": msg.SCHEDULE_LAST(kind="connection_check", date="2026-05-08"),
        "warning → critical": msg.ESCALATED(before="warning", after="critical"),
        "XID 79 again": msg.XID_AGAIN(code="79"),
        checklist_note: msg.CHECKLIST_FAILED(
            item="Fans respond", run="12", template="Before a long training run", url="/checklists/runs/12/"
        ),
        "level 3 diagnostic 6f1c2a9e-0000-4000-8000-000000000001: memtest": (
            importlib.import_module("portal.diagnostics.messages").TICKET(
                level="3", id="6f1c2a9e-0000-4000-8000-000000000001", tests="memtest")
        ),
    }  # fmt: skip
    typed = ["a note somebody typed", "XID 79 again and again"]
    for note in [*written, *typed]:
        TicketEvent.objects.create(ticket=ticket, kind="state", at=T0, note=note)

    migration.forwards(django_apps, None)

    stored = dict(TicketEvent.objects.filter(note__in=[*written, *typed]).values_list("note", "note_msg"))
    assert stored == {**{note: said.stored() for note, said in written.items()}, **dict.fromkeys(typed)}
    ticket.refresh_from_db()
    title = msg.CHECKLIST_TITLE(item="Fans respond", subject=msg.subject(host="dgx-07", gpu_index="2"))
    assert ticket.title_msg == title.stored()
    action = msg.ACTION_WITH_NOTE(action="checklist_failed", note=written[checklist_note])
    assert ticket.action_msg == action.stored() and str(action) == ticket.action


@pytest.mark.django_db(transaction=True)
def test_migrating_forwards_fills_the_messages_of_rows_written_before():
    try:
        old = migrate_to([("maintenance", "0008_agent_silent_unit_gpu_fleet_agent")])
    except Exception:
        migrate_to_newest()
        raise
    gpu = GpuFactory(host=HostFactory(hostname="dgx-07"), index=2)
    ticket = old.get_model("maintenance", "Ticket").objects.create(
        fingerprint=f"overheat/gpu/{gpu.pk}", rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk,
        title="GPU overheating: GPU 2 on dgx-07", action=RULES["overheat"].action, severity="critical",
        first_seen=T0, last_seen=T0,
    )  # fmt: skip
    Event = old.get_model("maintenance", "TicketEvent")
    Event.objects.create(ticket=ticket, kind="escalated", at=T0, note="warning → critical")
    Event.objects.create(ticket=ticket, kind="state", at=T0, note="looked at it, fans fine")

    new = migrate_to_newest()
    migrated = new.get_model("maintenance", "Ticket").objects.get(pk=ticket.pk)
    assert messages.english(migrated.title_msg) == migrated.title and migrated.action_msg["params"] == {
        "action": "overheat"
    }
    notes = dict(new.get_model("maintenance", "TicketEvent").objects.values_list("note", "note_msg"))
    assert notes == {"warning → critical": msg.ESCALATED(before="warning", after="critical").stored(),
                     "looked at it, fans fine": None}  # fmt: skip
