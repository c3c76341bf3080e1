"""The main pages in Simplified Chinese: a user whose language is zh-hans walks the
fleet, host, GPU, ticket, checklist, report, wear, account and guidance pages, and no visible
text is English interface text.

"Untranslated" is decided per visible text node (and per placeholder, button value and page
title): take away what people and agents typed (host names, GPU models, serials, notes, user
names: tests/browser/page_data.py reads them from the portal's database), what a template marks
as data (`translate="no"`, `data-i18n-skip`, `<code>`, `<kbd>`, `<pre>`, `<samp>`), chart tick
labels, numbers, and the Latin terms Chinese technicians use as they are (GPU, Xid, ECC, PCIe,
NVLink, units, …: LATIN_TERMS). Any English word left is untranslated interface text, listed
with its page and where it sits (header or main). A template that shows data the list above
does not know marks it `translate="no"`.

SAVE_DOCS_SCREENSHOTS=1 also saves the fleet, GPU, ticket and checklist pages in Chinese to
docs/zh-*.png. I18N_WALK_ALL=1 walks every signed-in page instead of the main ones.
"""

import contextlib
import datetime as dt
import json
import os
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.browser.conftest import do_login, seeded_portal
from tests.browser.readings import gpu_uuid, host_token_issue, post_readings, reading
from tests.browser.site_walk import site_pages
from tests.portal_process import REPO, in_ci

pytestmark = pytest.mark.browser

MAIN_PAGES = [
    "fleet:fleet", "fleet:host", "fleet:gpu", "maintenance:tickets", "maintenance:ticket", "checklists:my_work",
    "checklists:run", "reports:reliability", "reports:gpu_repairs", "wear:fleet", "accounts:profile",
    "guidance:index", "guidance:practice",
]  # fmt: skip
SCREENSHOTS = {
    "fleet:fleet": "zh-fleet.png",
    "fleet:gpu": "zh-gpu.png",
    "maintenance:ticket": "zh-ticket.png",
    "checklists:run": "zh-checklist.png",
}
# Latin words a Chinese page keeps as they are: product and protocol names, abbreviations, units,
# and the glossary's terms kept in brackets (采集代理 (agent), 排空 (drain), 返修 (RMA)).
LATIN_TERMS = {
    "GPU", "CPU", "ECC", "Xid", "XID", "PCIe", "PCI", "NVLink", "NVML", "NVIDIA", "CUDA", "DCGM", "RMA", "UUID",
    "ID", "PDF", "CSV", "JSON", "API", "URL", "HTTP", "HTTPS", "Slurm", "Webhook", "webhook", "Lark", "Feishu",
    "DingTalk", "WeCom", "Slack", "SMTP", "UTC", "PNG", "JPEG", "SSH", "IP", "BIOS", "VBIOS", "SM", "HBM", "SXM",
    "Gen", "MHz", "GHz", "kWh", "Wh", "kW", "GB", "GiB", "MB", "MiB", "TB", "TiB", "nvidia-smi", "systemctl",
    "agent", "drain", "English", "Plotly", "WebSocket", "Celery", "Redis", "PostgreSQL", "SQLite", "MTBF", "MTTR",
    "RFC", "OpenAPI", "Linux", "Python",
}  # fmt: skip
WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]|[A-Za-z]")

COLLECT = """
() => {
  const SKIP = "script,style,noscript,template,code,kbd,samp,pre,textarea,[translate=no],[data-i18n-skip],"
             + ".xtick,.ytick,.modebar";
  const where = (el) => {
    const region = el.closest("header") ? "header" : el.closest("main") ? "main" : "page";
    const cls = typeof el.className === "string" && el.className ? "." + el.className.trim().split(/\\s+/)[0] : "";
    return region + " " + el.tagName.toLowerCase() + (el.id ? "#" + el.id : cls);
  };
  const shown = (el) => {
    const box = el.closest("select") || el;
    return box.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}) && box.getClientRects().length > 0;
  };
  const out = [{text: document.title, where: "title"}];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    const text = node.nodeValue.replace(/\\s+/g, " ").trim();
    if (text && el && !el.closest(SKIP) && shown(el)) out.push({text, where: where(el)});
  }
  const fields = "input[placeholder],textarea[placeholder],input[type=submit],input[type=button],input[type=reset]";
  for (const el of document.querySelectorAll(fields)) {
    if (el.closest(SKIP) || !shown(el)) continue;
    const text = (el.type === "submit" || el.type === "button" || el.type === "reset") ? el.value : el.placeholder;
    const kind = el.placeholder ? "@placeholder" : "@value";
    if (text && text.trim()) out.push({text: text.trim(), where: where(el) + kind});
  }
  return out;
}
"""


def english_words(text: str, data: list[re.Pattern]) -> list[str]:
    """The English words of `text` once data and the terms kept in Latin are taken out."""
    for pattern in data:
        text = pattern.sub(" ", text)
    return [w for w in WORD.findall(text) if len(w) > 1 and w not in LATIN_TERMS and w.strip("-'’") not in LATIN_TERMS]


def data_patterns(strings: list[str]) -> list[re.Pattern]:
    """Longest first, each bounded so that a user called "tech" does not hide "technician"."""
    kept = sorted((s for s in strings if len(s) >= 3), key=len, reverse=True)
    return [re.compile(rf"(?<![A-Za-z]){re.escape(s)}(?![A-Za-z])") for s in kept]


def test_english_words_finds_interface_text_and_not_data():
    data = data_patterns(["node-a01", "NVIDIA H100 80GB HBM3", "tech", "Replaced the fan"])
    assert english_words("node-a01 · NVIDIA H100 80GB HBM3 · 3 块 GPU · 72 °C · 250 W · 1410 MHz", data) == []
    assert english_words("Xid 79 · ECC 错误 · PCIe 链路 · 采集代理 (agent)", data) == []
    assert english_words("由 tech 记录：Replaced the fan", data) == []
    assert english_words("Open tickets", data) == ["Open", "tickets"]
    assert english_words("technician", data) == ["technician"]
    assert english_words("3 GPUs", data) == ["GPUs"]


@pytest.fixture(scope="module")
def zh_portal(tmp_path_factory):
    """A portal of its own: the walk makes admin's language zh-hans, which the other tests don't expect."""
    yield from seeded_portal(tmp_path_factory.mktemp("zh"))


@pytest.fixture(scope="module")
def zh_page(browser, zh_portal):
    mo = REPO / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.mo"
    if not mo.exists():
        message = f"{mo.relative_to(REPO)} is missing: `make messages` compiles the catalogue"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    context = browser.new_context(base_url=zh_portal.base_url, viewport={"width": 1280, "height": 900},
                                  locale="zh-CN")  # fmt: skip
    context.set_default_timeout(15_000)
    page = context.new_page()
    do_login(page, "admin", zh_portal.credentials["admin"])
    # The user's own setting (the header's switch also sets the profile), not just the browser's.
    page.select_option("#header-language", "zh-hans")
    with page.expect_navigation():
        page.click("form.language button[type=submit]")
    assert page.evaluate("document.documentElement.lang") == "zh-hans"
    yield page
    context.close()


@pytest.fixture(scope="module")
def zh_pages(zh_portal) -> dict[str, list[str]]:
    urls: dict[str, list[str]] = {}
    for entry in site_pages(zh_portal):
        if entry["logged_in"] and not entry["name"].startswith("admin:"):
            urls.setdefault(entry["name"], []).append(entry["url"])
    return urls


@pytest.fixture(scope="module")
def zh_data(zh_portal) -> list[re.Pattern]:
    out = zh_portal.manage("shell", "-c", "from tests.browser.page_data import print_data; print_data()").stdout
    return data_patterns(json.loads(re.search(r"^DATA (.*)$", out, re.M).group(1)))


def walked_names() -> list[str]:
    return MAIN_PAGES if os.environ.get("I18N_WALK_ALL") != "1" else ["*"]


@pytest.mark.parametrize("name", walked_names())
def test_page_has_no_untranslated_interface_text(name, zh_page, zh_pages, zh_data):
    names = sorted(zh_pages) if name == "*" else [name]
    missing = [n for n in names if n not in zh_pages]
    assert not missing, f"no such page in tests/browser/site_pages.py: {missing}"
    found = []
    for page_name in names:
        for number, url in enumerate(zh_pages[page_name]):
            zh_page.goto(url, wait_until="load")
            with contextlib.suppress(PlaywrightTimeout):
                zh_page.wait_for_load_state("networkidle", timeout=5_000)
            assert zh_page.evaluate("document.documentElement.lang") == "zh-hans", url
            if os.environ.get("SAVE_DOCS_SCREENSHOTS") == "1" and page_name in SCREENSHOTS and number == 0:
                zh_page.screenshot(path=str(REPO / "docs" / SCREENSHOTS[page_name]), full_page=True)
            seen = set()
            for node in zh_page.evaluate(COLLECT):
                words = english_words(node["text"], zh_data)
                if words and (node["text"], node["where"]) not in seen:
                    seen.add((node["text"], node["where"]))
                    found.append(f"{url} [{node['where']}] {node['text']!r} (English: {' '.join(words)})")
    assert not found, f"untranslated interface text on {len(found)} nodes:\n  " + "\n  ".join(found)


def test_the_live_ticket_feed_shows_a_new_ticket_in_the_readers_language(zh_page, zh_portal):
    """The feed sends one message to readers of every language; it carries a title for each."""
    zh_page.goto("/", wait_until="load")
    expect(zh_page.locator("#live-tickets .live-indicator")).to_have_attribute("data-state", "live")
    now = dt.datetime.now(dt.UTC)
    hot = [reading(now - dt.timedelta(seconds=s), 84, gpu_uuid=gpu_uuid(2)) for s in range(180, 0, -10)]
    post_readings(zh_portal.base_url, host_token_issue(zh_portal), hot)
    item = zh_page.locator("#ticket-feed li", has_text="GPU 过热").first
    expect(item).to_be_visible(timeout=20_000)
    assert "overheating" not in item.inner_text(), item.inner_text()
