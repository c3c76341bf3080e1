"""End to end in Chromium: log in, read the fleet, add a cleaning record through the form."""

import datetime as dt
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

SEEDED_HOSTS = ["dgx-01", "dgx-02", "ws-lab-03"]


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()  # the portal runs on TIME_ZONE=UTC


def test_fleet_page_shows_the_seeded_hosts(page, portal_server, login, screenshot):
    login(page, "admin", portal_server.credentials["admin"])
    page.goto("/")
    expect(page.locator("h1")).to_contain_text("3 hosts, 12 GPUs")
    expect(page.locator("#fleet-hosts tr.host-row")).to_have_count(len(SEEDED_HOSTS))
    for hostname in SEEDED_HOSTS:
        expect(page.locator(f"#host-{hostname} td a").first).to_have_text(hostname)
    page.locator("#host-ws-lab-03 summary").click()  # its GPU rows, fetched on demand
    gpus = page.locator("#host-ws-lab-03 + tr.host-gpus table.gpus tbody tr")
    expect(gpus).to_have_count(4)
    expect(gpus.locator(".age-never")).to_have_count(4)  # the workstation was never cleaned
    screenshot(page, "fleet.png")


def test_add_cleaning_record_on_a_gpu(page, portal_server, login, screenshot):
    login(page, "admin", portal_server.credentials["admin"])
    page.goto("/")
    page.locator("#host-ws-lab-03 summary").click()
    page.locator("#host-ws-lab-03 + tr.host-gpus table.gpus tbody tr").first.locator("a").first.click()
    expect(page.locator(".crumbs")).to_contain_text("ws-lab-03 › GPU 0")
    care = page.locator("dl.details", has_text="Last cleaning")
    expect(care.locator("dt:text('Last cleaning') + dd")).to_have_text("never")
    screenshot(page, "gpu.png")
    gpu_url = page.url

    page.select_option("#add-record-kind", "cleaning")
    page.get_by_role("button", name="Add…").click()
    expect(page.locator("h1")).to_contain_text("Cleaning (dust, airflow) on GPU")
    page.fill("#id_notes", "Dusty intake; blew it out.")
    page.get_by_role("button", name="Save record").click()  # dust level left empty

    error = page.locator("#id_dust_level_error")
    expect(error).to_be_visible()
    expect(error).to_have_text("This field is required.")
    # beside its field: the same .field block holds the select and the message
    field = page.locator(".field.has-error", has=page.locator("#id_dust_level"))
    expect(field.locator(".error")).to_have_text("This field is required.")
    expect(page.locator("#id_notes")).to_have_value("Dusty intake; blew it out.")
    screenshot(page, "record-form-error.png")

    page.select_option("#id_dust_level", "heavy")
    page.get_by_role("button", name="Save record").click()
    page.wait_for_url(gpu_url)
    newest = page.locator("ol.timeline li").first
    expect(newest).to_contain_text("Cleaning")
    expect(newest).to_contain_text("dust: Heavy")
    expect(newest.locator("time")).to_contain_text(today())
    expect(page.locator("dt:text('Last cleaning') + dd")).to_contain_text(f"{today()} (0 d)")

    # The other GPUs of the host were not cleaned by it; the server's database agrees.
    page.goto("/")
    page.locator("#host-ws-lab-03 summary").click()
    cleanings = page.locator("#host-ws-lab-03 + tr.host-gpus table.gpus tbody tr td:nth-child(6)")
    expect(cleanings.locator(".age-never")).to_have_count(3)
    count = (
        "from portal.fleet.models import MaintenanceRecord as R; print(R.objects.filter("
        "kind='cleaning', gpu__host__hostname='ws-lab-03', recorded_by__username='admin').count())"
    )
    shell = portal_server.manage("shell", "-c", count)
    assert shell.stdout.strip().splitlines()[-1] == "1"


def test_phone_sized_fleet_page_does_not_overflow(browser, portal_server, login, screenshot):
    context = browser.new_context(
        base_url=portal_server.base_url, viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True
    )
    try:
        page = context.new_page()
        login(page, "viewer", portal_server.credentials["viewer"])
        page.goto("/")
        expect(page.locator("#fleet-hosts tr.host-row")).to_have_count(3)
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        screenshot(page, "fleet-phone.png")
        assert widths[0] <= widths[1], f"page is {widths[0]} px wide in a {widths[1]} px viewport"
        expect(page.locator("a.button", has_text="New host")).to_have_count(0)  # viewers write nothing
    finally:
        context.close()


def test_login_redirects_back_to_next(page, portal_server, login):
    page.goto("/audit/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/audit/$"))
    page.fill("#id_username", "tech")
    page.fill("#id_password", portal_server.credentials["tech"])
    page.click("main button[type=submit]")
    expect(page).to_have_url(re.compile(r"/audit/$"))
    expect(page.locator("table.audit tbody tr").first).to_be_visible()


def test_fleet_page_needs_attention_filter_and_gpu_rows_on_demand(page, portal_server, login, screenshot):
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/")
    rows = page.locator("#fleet-hosts tr.host-row")
    attention = page.locator("#fleet-hosts tr.host-row.attention")
    needing = attention.count()
    # hosts that need attention come first, each with its problems named
    for position in range(needing):
        expect(rows.nth(position)).to_have_class(re.compile(r"\battention\b"))
        expect(rows.nth(position).locator(".problem").first).to_be_visible()
    expect(page.locator("tr.host-gpus")).to_have_count(0)  # no GPU rows until asked
    page.locator("#attention-filter").click()
    expect(page.locator("#fleet-hosts tr.host-row")).to_have_count(needing)
    page.goto("/")
    page.locator("#host-dgx-01 summary").click()
    expect(page.locator("#host-dgx-01 + tr.host-gpus table.gpus tbody tr").first).to_be_visible()
    page.locator("#host-dgx-01 summary").click()
    expect(page.locator("#host-dgx-01 + tr.host-gpus")).to_be_hidden()
    page.locator("#host-dgx-01 summary").click()
    screenshot(page, "fleet-gpus-open.png")
