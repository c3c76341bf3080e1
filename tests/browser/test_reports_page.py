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


def test_the_usage_report_without_jobs_says_so_instead_of_drawing_empty_axes(page, portal_server, login):
    """The demo seed's hosts ran no job: the per-user chart says "No job ran in the period." (it
    drew an axis from −1 to 4), the energy chart has no kWh to draw, and a busy share reads 0–100 %."""
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/reports/usage")
    users = page.locator("#usage-users")
    expect(users).to_have_attribute("data-empty", "true")
    expect(users).to_contain_text("No job ran in the period.")
    assert "−1" not in users.inner_text()
    expect(page.locator("#usage-energy")).to_contain_text("No data in the period.")
    expect(page.locator("#usage-days .ytick").last).to_have_text("100")
    assert page.evaluate("document.getElementById('usage-days').layout.yaxis.range") == [0, 100]


def test_the_failure_rates_numbers_sit_under_their_headers(page, portal_server, login):
    """The counts' columns right-aligned under right-aligned headers (the numbers of columns 2-3
    were left and the text of 'Published' right, under headers all left)."""
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/reports/reliability")
    table = page.locator("table.failure-rates")
    for column in (2, 3):
        head = table.locator(f"thead th:nth-child({column})").bounding_box()
        cell = table.locator(f"tbody tr:first-child :nth-child({column})").bounding_box()
        text = table.locator(f"tbody tr:first-child :nth-child({column})").evaluate(
            "el => { const r = document.createRange(); r.selectNodeContents(el);"
            " return r.getBoundingClientRect().right; }"
        )
        assert abs((head["x"] + head["width"]) - (cell["x"] + cell["width"])) < 1
        assert cell["x"] + cell["width"] - text < 12, (column, cell, text)  # the number at the right edge
    published = table.locator("tbody tr:first-child td.text")
    assert published.evaluate("el => getComputedStyle(el).textAlign") in ("left", "start")


def test_the_usage_tables_say_they_are_empty_at_the_left(page, portal_server, login):
    """A usage table with no rows says so in one cell whose text starts at the left, under the
    first header (the Users, Accounts and Models tables right-align every cell for their numbers,
    and "No job ran in the period." sat at the right edge)."""
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/reports/usage?from=2001-01-01&to=2001-02-01")  # long before the demo's GPUs: no rows
    people = page.locator("table.usage-people")
    for name, table in (
        ("users", people.nth(0)),
        ("accounts", people.nth(1)),
        ("models", page.locator("table.usage-models")),
    ):
        cell = table.locator("tbody td[colspan]")
        expect(cell).to_have_class(re.compile(r"\bempty\b"))
        assert cell.evaluate("el => getComputedStyle(el).textAlign") in ("left", "start"), name
        box = cell.bounding_box()
        text_left = cell.evaluate(
            "el => { const r = document.createRange(); r.selectNodeContents(el);"
            " return r.getBoundingClientRect().left; }"
        )
        assert text_left - box["x"] < 12, (name, box, text_left)  # the sentence at the left edge
