"""An automatic answer stores its evidence's summary (and each GPU's reason) in English, as the API
returns it, and as messages beside it; the run's page shows them in the reader's language. The
checklist tickets name the failed item as a message too. Answers stored before are migrated once
from their English."""

import importlib
import shutil
import subprocess
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.conf import settings as django_settings
from django.utils import translation

from portal.checklists import messages as checklist_messages
from portal.checklists import services
from portal.checklists.models import ChecklistAnswer
from portal.core import messages
from portal.maintenance.models import Ticket
from tests.checklists.test_checklist_autochecks import PRE_TRAINING

pytestmark = pytest.mark.django_db
CATALOGUE = Path(django_settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
MIGRATION = importlib.import_module("portal.checklists.migrations.0004_messages")
# Sentences the checks wrote, as answers stored them before messages.
STORED = [
    "idle median ≤ 41.5 °C (limit 45 °C) over the last 30 min",
    "no idle readings (utilization ≤ 5 %) in the last 30 min",
    "no uncorrected ECC error and no pending remap in the last 60 min",
    "uncorrected ECC errors or pending remaps on GPU 0, GPU 3",
    "no ECC figures reported",
    "fans spin and follow the temperature (last 30 min)",
    "fans stopped or not following the temperature on GPU 1",
    "no fan speed reported",
    "last backup 2026-12-01 03:00 UTC (verified); needed within 7 days",
    "last backup 2026-12-01 03:00 UTC (not verified); needed within 7 days",
    "no backup record on this host; needed within 7 days",
    "verification pending: waiting for loaded readings after the cleaning",
    "not enough loaded readings to compare at equal power",
    "3.5 °C cooler or more at equal power (needed ≥ 3 °C)",
    "only 1.2 °C cooler at equal power (needed ≥ 3 °C)",
    "no loaded readings before the cleaning",
    "12 of 60 loaded readings after the cleaning",
    "5 of 60 loaded readings after the cleaning; none yet at a power seen before",
    "waiting for the diagnostic",
]


@pytest.fixture
def chinese_catalogue(tmp_path, settings):
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (gettext) is not installed")
    target = tmp_path / "zh_Hans" / "LC_MESSAGES"
    target.mkdir(parents=True)
    subprocess.run(["msgfmt", "-o", str(target / "django.mo"), str(CATALOGUE)], check=True)
    settings.LOCALE_PATHS = [tmp_path]
    yield
    translation.activate(settings.LANGUAGE_CODE)


def test_answers_store_messages_and_the_page_shows_them_translated(technician, host, chinese_catalogue):
    run = services.run_start(template_key="pre_training", hostname="node-a", gpu_uuids=None, user=technician)
    services.run_answer(run=run, answers=PRE_TRAINING, user=technician)
    run = services.run_complete(run=run, signature="Bob", user=technician)
    backup = ChecklistAnswer.objects.get(run=run, item_key="backup")
    assert backup.evidence["summary"] == "no backup record on this host; needed within 7 days"  # the API's
    assert backup.evidence_msgs == {"summary": checklist_messages.BACKUP_NONE(days=7).stored()}
    with translation.override("zh-hans"):
        summary, _ = checklist_messages.evidence_shown(backup.evidence, backup.evidence_msgs)
    assert summary != backup.evidence["summary"] and "7" in summary

    ticket = Ticket.objects.get(rule="checklist_failed")
    note = ticket.events.get(kind="opened")
    assert note.note == f"A backup record in the last 7 days failed in checklist run #{run.pk} (Before a long " \
        f"training run) ({run.get_absolute_url()})"  # fmt: skip
    assert ticket.title == "A backup record in the last 7 days failed: node-a"
    with translation.override("zh-hans"):
        assert "node-a" in ticket.title_shown and "A backup record" not in ticket.title_shown
        assert "A backup record" not in note.note_shown and f"#{run.pk}" in note.note_shown


def test_the_migration_reads_the_sentences_the_checks_wrote():
    for text in STORED:
        stored = MIGRATION.sentence_message(text)
        assert stored is not None, text
        assert stored["id"] in messages.catalogue(), "a migrated id the portal no longer knows"
        assert messages.english(stored) == text
    assert MIGRATION.sentence_message("a note somebody wrote (50 %)") is None


def test_the_migration_fills_the_stored_answers(technician, host):
    run = services.run_start(template_key="pre_training", hostname="node-a", gpu_uuids=None, user=technician)
    services.run_answer(run=run, answers=PRE_TRAINING, user=technician)
    run = services.run_complete(run=run, signature="Bob", user=technician)
    evidence = {
        "summary": STORED[-3],
        "gpus": [{"uuid": "GPU-1", "why": STORED[-2]}, {"uuid": "GPU-2", "why": "typed"}],
    }
    ChecklistAnswer.objects.filter(run=run, item_key="backup").update(evidence=evidence, evidence_msgs={})
    MIGRATION.forwards(django_apps, None)
    msgs = ChecklistAnswer.objects.get(run=run, item_key="backup").evidence_msgs
    assert set(msgs) == {"summary", "why"} and set(msgs["why"]) == {"GPU-1"}
    assert messages.english(msgs["summary"]) == STORED[-3] and messages.english(msgs["why"]["GPU-1"]) == STORED[-2]
