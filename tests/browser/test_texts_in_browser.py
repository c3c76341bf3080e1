"""The portal's texts as a new user reads them in Chromium, on the demo's data (seed_demo, its repair
history, the due tickets a fresh demo opens at once): no config keys or fingerprints on a ticket, a
unit or name on every peak, one failure category for an XID everywhere, an audit log of names and
one time format, wear scores for GPUs with readings only, and the report's repeat offenders in
Chinese. Each page is screenshotted at 1400 px and 390 px (test-artifacts/texts-*.png);
SAVE_DOCS_SCREENSHOTS=1 also keeps the desktop and phone ticket, report and audit pages in
docs/screenshots/."""

import os
import re
import shutil

import pytest

from tests.browser.conftest import do_login, save_screenshot, seeded_portal
from tests.portal_process import REPO, manage

pytestmark = pytest.mark.browser

WIDTHS = (1400, 390)
DUE_TICKETS = "from portal.maintenance.tasks import schedules_check_task; schedules_check_task()"


@pytest.fixture(scope="module")
def texts_portal(tmp_path_factory):
    for portal in seeded_portal(tmp_path_factory.mktemp("texts")):
        manage(portal.env, "seed_repair_history")
        manage(portal.env, "shell", "-c", DUE_TICKETS)
        yield portal


def _page(browser, portal, width, language="en"):
    context = browser.new_context(base_url=portal.base_url, viewport={"width": width, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    do_login(page, "admin", portal.credentials["admin"])
    if language != "en":
        context.add_cookies([{"name": "django_language", "value": language, "url": portal.base_url}])
    return page


def _shot(page, name: str, width: int) -> None:
    path = save_screenshot(page, f"texts-{name}-{width}.png")
    if os.environ.get("SAVE_DOCS_SCREENSHOTS"):
        (REPO / "docs" / "screenshots").mkdir(exist_ok=True)
        shutil.copy(path, REPO / "docs" / "screenshots" / f"{name}-{width}.png")


@pytest.mark.parametrize("width", WIDTHS)
def test_ticket_list_peaks_have_units_and_titles_name_their_subject(browser, texts_portal, width):
    page = _page(browser, texts_portal, width)
    page.goto("/tickets/?state=")
    rows = page.locator("main table tbody tr")
    peaks = {row.locator("td").nth(2).inner_text(): row.locator("td").nth(6).inner_text() for row in rows.all()}
    _shot(page, "tickets", width)
    assert any(title.startswith("Cleaning due: ") for title in peaks)
    for title, peak in peaks.items():
        assert not re.fullmatch(r"\s*[−-]?\d+(\.\d+)?\s*", peak), f"{title}: a bare number {peak!r}"
        assert ": host " not in title, title
        if title.startswith(("Cleaning due", "Backup due", "Driver review due", "Connection check due")):
            assert re.search(r"overdue|due in|due now", peak), (title, peak)
    assert "PCIe link degraded: GPU 3 on dgx-01" in peaks, list(peaks)


@pytest.mark.parametrize("width", WIDTHS)
def test_an_xid_ticket_speaks_one_vocabulary_and_no_code(browser, texts_portal, width):
    page = _page(browser, texts_portal, width)
    page.goto("/tickets/?state=&rule=xid_bus")
    page.locator("main table tbody tr a").first.click()
    main = page.locator("main").inner_text()
    _shot(page, "ticket", width)
    for leak in ("repeat_window_s", "clear_for_s", "None:", "xid_bus", "/gpu/"):
        assert leak not in main, leak
    assert page.locator(".failure-category").inner_text() == "PCIe / NVLink"
    assert "counted in the reliability report as PCIe / NVLink" in main
    assert page.locator(".ticket-peak").inner_text() == "XID 79"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_audit_log_names_objects_and_has_one_time_format(browser, texts_portal, width):
    page = _page(browser, texts_portal, width)
    page.goto("/audit/")
    main = page.locator("main").inner_text()
    _shot(page, "audit", width)
    assert "EnrolmentAttempt.None" not in main
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d{3,6}", main), "a time with microseconds"
    assert not re.search(r"\b(Host|GPU|Gpu|Recorded by|Created by|Requested by): \d+\b", main), "an id, not a name"
    assert re.search(r"Host: dgx-0\d", main) and "Performed at: " in main


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_in_chinese_explains_its_repeat_offenders(browser, texts_portal, width):
    page = _page(browser, texts_portal, width, language="zh-hans")
    page.goto("/reports/reliability")
    offenders = page.locator("section.offenders:not(.lemons)").inner_text()
    _shot(page, "report-zh", width)
    assert "天内" in offenders or "再次出现硬件 XID" in offenders, offenders
    assert "hardware failures within" not in offenders and "again on" not in offenders


def test_wear_ranks_only_gpus_with_readings(browser, texts_portal):
    page = _page(browser, texts_portal, 1400)
    page.goto("/wear/")
    _shot(page, "wear", 1400)
    # the demo's seeded hosts never sent a reading: no score, nobody to inspect first on age alone
    assert page.locator("ol.inspect-first li").count() == 0
    assert page.locator("main table tbody").get_by_text("no readings").count() > 0
