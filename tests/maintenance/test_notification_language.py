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
from portal.core import messages
from portal.maintenance import chat
from portal.maintenance import messages as msg
from portal.maintenance.models import Subscription, Ticket
from portal.maintenance.services.notify import notification_send, notify_ticket
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
    title = msg.TITLE(problem="overheat", subject=msg.subject(host="dgx-07", gpu_index=2))
    action = msg.ACTION(action="overheat")
    return Ticket.objects.create(
        fingerprint=f"overheat/gpu/{gpu.pk}", rule="overheat", host=host, gpu=gpu, severity="critical",
        title=str(title), title_msg=title.stored(), action=str(action), action_msg=action.stored(),
        first_seen=now, last_seen=now,
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
        text = chat.ticket_text(payload, ticket)
    assert text.splitlines()[:2] == ["[严重] 已解决：GPU 过热：dgx-07 上的 GPU 2", "主机 dgx-07，GPU GPU-0002"]
    with translation.override("en"):
        english = chat.ticket_text(payload, ticket)
    assert english.splitlines()[0] == "[critical] resolved: GPU overheating: GPU 2 on dgx-07"
    assert payload["ticket"]["title"] == "GPU overheating: GPU 2 on dgx-07", "the JSON webhook's data is untouched"


NOTES = [
    (msg.SLOWDOWN(), "reached the slowdown threshold"),
    (msg.GROUP_COUNT(count=3, total=4), "3 of 4 GPUs"),
    (msg.XID_AGAIN(code=79), "XID 79 again"),
    (msg.OVERDUE(note=msg.SCHEDULE_LAST(kind="connection_check", date="2026-05-08")),
     "overdue: last connection check: 2026-05-08"),
    (msg.SCHEDULE_METER(meter="busy_hours", counted="1,620", kind="cleaning", date="2026-01-02", limit="1,500",
                        past="120"), "busy hours: 1,620 since the last cleaning (2026-01-02), every 1,500: 120 past"),
    (msg.ESCALATED(before="warning", after="critical"), "warning → critical"),
]  # fmt: skip


def test_event_notes_are_stored_in_english_and_shown_in_the_readers_language(chinese_catalogue):
    assert [str(said) for said, _ in NOTES] == [english for _, english in NOTES]
    with translation.override("en"):
        assert [messages.shown(said.stored(), "?") for said, _ in NOTES] == [english for _, english in NOTES]
        assert messages.shown(None, "a note somebody typed") == "a note somebody typed"
    with translation.override("zh-hans"):
        overdue, escalated = NOTES[3][0], NOTES[5][0]
        assert messages.shown(overdue.stored(), str(overdue)) == "已逾期：上次连接检查：2026-05-08"
        assert messages.shown(escalated.stored(), str(escalated)) == "警告 → 严重"
        assert messages.shown(None, "a note somebody typed") == "a note somebody typed"
