"""The reliability report in Chromium: the seeded fleet's GPUs, sorting by a column, a GPU's
repair history one click away, and the CSV/PDF links."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_reliability_report_sorts_and_links_to_repair_history(page, portal_server, login, screenshot):
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/reports/reliability")
    expect(page.locator("h1")).to_contain_text("Reliability report")
    rows = page.locator("table.sortable tbody tr")
    expect(rows).to_have_count(12)
    expect(page.locator("tr.fleet-row td").first).to_have_text("12")
    # seed_demo's workstation GPU 3 has the one repair: sorting by repairs, descending, puts it first
    page.locator("table.sortable th a", has_text="Repairs").click()
    page.locator("table.sortable th a", has_text="Repairs").click()
    expect(page).to_have_url(re.compile(r"sort=-repairs"))
    expect(rows.first.locator("td").nth(1)).to_have_text("ws-lab-03 #3")
    expect(page.locator("a", has_text="PDF")).to_have_attribute("href", re.compile(r"format=pdf"))
    screenshot(page, "reliability.png")
    rows.first.locator("td a").first.click()
    expect(page.locator("h1")).to_contain_text("Repair history")
    expect(page.locator(".timeline")).to_contain_text("RMA-2026-0411")
