"""A ticket notification goes out in its subscriber's language (their profile's, else
LANGUAGE_CODE): e-mail subject and body, and a chat robot's text. The ticket itself (its stored
title and action, what the API returns) stays English."""

import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core import mail
from django.utils import timezone, translation

from portal.accounts.models import UserProfile
from portal.maintenance import chat
from portal.maintenance.models import Subscription, Ticket
from portal.maintenance.rules import RULES
from portal.maintenance.services.notify import notification_send, notify_ticket
from portal.maintenance.texts import note_shown
from tests.factories import GpuFactory, HostFactory, UserFactory

pytestmark = pytest.mark.django_db
CATALOGUE = Path(django_settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"


@pytest.fixture
def chinese_catalogue(tmp_path, settings):
    """The Chinese catalogue compiled into a scratch LOCALE_PATHS (a clean clone has no .mo)."""
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (gettext) is not installed")
    target = tmp_path / "zh_Hans" / "LC_MESSAGES"
    target.mkdir(parents=True)
    subprocess.run(["msgfmt", "-o", str(target / "django.mo"), str(CATALOGUE)], check=True)
    settings.LOCALE_PATHS = [tmp_path]  # the setting_changed signal drops Django's cached catalogues
    yield
    translation.activate(settings.LANGUAGE_CODE)


@pytest.fixture
def ticket():
    host = HostFactory(hostname="dgx-07")
    gpu = GpuFactory(host=host, index=2)
    now = timezone.now()
    return Ticket.objects.create(
        fingerprint=f"overheat/gpu/{gpu.pk}", rule="overheat", host=host, gpu=gpu, severity="critical",
        title="GPU overheating: GPU 2 on dgx-07", action=RULES["overheat"].action, first_seen=now, last_seen=now,
    )  # fmt: skip


def _subscriber(name: str, language: str | None) -> Subscription:
    user = UserFactory(username=name)
    if language is not None:
        UserProfile.objects.create(user=user, language=language)
    return Subscription.objects.create(user=user, channel="email", target=f"{name}@example.com", min_severity="info")


def _mail_to(address: str):
    (message,) = [m for m in mail.outbox if m.to == [address]]
    return message


def test_email_in_each_subscribers_language(chinese_catalogue, ticket, settings):
    settings.LANGUAGE_CODE = "en"
    _subscriber("li", "zh-hans")
    _subscriber("ann", "en")
    _subscriber("bob", None)  # no choice: the portal's language
    for row in notify_ticket(ticket=ticket, event="opened"):
        notification_send(notification_id=row.pk)

    chinese = _mail_to("li@example.com")
    assert chinese.subject == "[严重] 新工单：GPU 过热：dgx-07 上的 GPU 2"
    assert "处理方法：检查服务器周围的气流" in chinese.body and "Check the airflow" not in chinese.body
    assert f"/tickets/{ticket.pk}/" in chinese.body

    for address in ("ann@example.com", "bob@example.com"):
        english = _mail_to(address)
        assert english.subject == "[critical] opened: GPU overheating: GPU 2 on dgx-07"
        assert english.body.startswith("GPU overheating: GPU 2 on dgx-07\n\nWhat to do: Check the airflow around")

    ticket.refresh_from_db()
    assert ticket.title == "GPU overheating: GPU 2 on dgx-07", "the stored title (the API's) stays English"
    assert translation.get_language() == "en", "the subscriber's language does not leak out of the send"


def test_chat_text_follows_the_active_language(chinese_catalogue, ticket):
    payload = {"event": "resolved", "ticket": {
        "rule": "overheat", "title": ticket.title, "severity": "critical", "host": "dgx-07", "gpu": "GPU-0002",
        "action": ticket.action, "url": f"https://portal.example/tickets/{ticket.pk}/",
    }}  # fmt: skip
    with translation.override("zh-hans"):
        text = chat.ticket_text(payload)
    assert text.splitlines()[:2] == ["[严重] 已解决：GPU 过热：dgx-07 上的 GPU 2", "主机 dgx-07，GPU GPU-0002"]
    with translation.override("en"):
        assert chat.ticket_text(payload).splitlines()[0] == "[critical] resolved: GPU overheating: GPU 2 on dgx-07"
    assert payload["ticket"]["title"] == "GPU overheating: GPU 2 on dgx-07", "the JSON webhook's data is untouched"


NOTES = [
    "reached the slowdown threshold",
    "3 of 4 GPUs",
    "XID 79 again",
    "overdue: last connection check: 2026-05-08",
    "busy hours: 1,620 since the last cleaning (2026-01-02), every 1,500: 120 past",
    "warning → critical",
]


def test_event_notes_the_portal_wrote_are_translated_and_english_is_as_stored(chinese_catalogue):
    with translation.override("en"):
        assert [note_shown(note) for note in NOTES] == NOTES
        assert note_shown("a note somebody typed") == "a note somebody typed"
    with translation.override("zh-hans"):
        assert note_shown("overdue: last connection check: 2026-05-08") == "已逾期：上次连接检查：2026-05-08"
        assert note_shown("warning → critical") == "警告 → 严重"
        assert note_shown("a note somebody typed") == "a note somebody typed"
