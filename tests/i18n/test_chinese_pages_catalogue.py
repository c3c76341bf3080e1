"""No English sentence of the portal's own catalogue on a page rendered in Chinese.

The demo's fleet (seed_demo, its repair history, due tickets) is rendered page by page for a
reader whose language is zh-hans; every msgid of the Simplified Chinese catalogue that is a
sentence (three words or more) and whose translation differs from it must not appear in the
page's visible text. A text the templates or services show without translating (a rule's words
kept in English, an XID catalogue description, a reason built as an f-string) fails here with the
page and the sentence. Unlike the browser walk (tests/browser/test_chinese_pages.py) this runs on
the Django test client, in seconds, and names the catalogue's sentence that leaked.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.fleet.models import Gpu, Host
from portal.maintenance.models import Ticket
from tests.i18n.po import read
from tests.portal_process import REPO

CATALOGUE = REPO / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
SKIP_BLOCKS = re.compile(r"<(script|style|code|pre|kbd|samp|textarea)\b.*?</\1>", re.S | re.I)
TAG = re.compile(r"<[^>]+>")
PLACEHOLDER = re.compile(r"%\(\w+\)[sdf]|%[sdf]|\{\w*\}")


def _sentences() -> list[str]:
    """The catalogue's translated sentences, cut at their placeholders into the literal runs a page
    would show (a run of three words or more)."""
    runs = set()
    for entry in read(Path(CATALOGUE)):
        if not entry.translated or entry.msgstr[0] == entry.msgid:
            continue
        for run in PLACEHOLDER.split(TAG.sub(" ", entry.msgid)):
            run = " ".join(html.unescape(run).split()).strip(" .,;:()—-")
            if len(run.split()) >= 3 and re.search(r"[a-z]{3}", run):
                runs.add(run)
    return sorted(runs, key=len, reverse=True)


def _visible(page: str) -> str:
    body = page.split("<body", 1)[-1]
    body = re.sub(r'<[^>]+translate="no"[^>]*>.*?</[^>]+>', " ", body, flags=re.S)  # data, not interface text
    return " ".join(html.unescape(TAG.sub(" ", SKIP_BLOCKS.sub(" ", body))).split())


@pytest.fixture
def demo(db):
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115 (closed with the process)
    call_command("seed_repair_history", stdout=open("/dev/null", "w"))  # noqa: SIM115
    from portal.maintenance.tasks import schedules_check_task

    schedules_check_task()  # the due tickets a fresh demo shows at once


def _pages() -> list[str]:
    lemon = Gpu.objects.get(host__hostname="dgx-02", index=2)
    host = Host.objects.get(hostname="dgx-02")
    tickets = [t.get_absolute_url() for t in Ticket.objects.order_by("rule", "id").distinct()]
    return [
        "/", host.get_absolute_url(), lemon.get_absolute_url(), "/tickets/", *tickets[:12], "/reports/reliability",
        f"/reports/gpus/{lemon.uuid}/repairs", "/audit/", "/wear/", "/tickets/rules/", "/search/?q=dgx",
    ]  # fmt: skip


def test_no_catalogue_sentence_left_in_english_on_a_chinese_page(demo, client_for, admin):
    client = client_for(admin)
    sentences = _sentences()
    assert len(sentences) > 500, "the catalogue was not read"
    leaks = []
    for path in _pages():
        response = client.get(path, HTTP_ACCEPT_LANGUAGE="zh-hans")
        assert response.status_code == 200, path
        text = _visible(response.content.decode())
        assert '<html lang="zh-hans"' in response.content.decode(), path
        leaks += [f"{path}: {sentence!r}" for sentence in sentences if sentence in text]
    assert not leaks, "English on a Chinese page:\n" + "\n".join(leaks)
