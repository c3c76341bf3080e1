"""The wear pages in Chromium, over a lab with known wear (tests/wear/seed.py: 40 days of
readings every 120 s through the real meters, then deleted as retention would): the fleet wear
page ranks the hard-worked GPU first and lists it to inspect first; its GPU page's Wear panel
shows the lifetime totals, the monthly chart (Plotly) and the thermal resistance climbing with
dust and dropping after the cleaning, the cleaning marked."""

import datetime as dt
import json
import math
import re

import pytest
from playwright.sync_api import expect

from tests.wear import seed

pytestmark = pytest.mark.browser

PER_DAY = 86400 // seed.STEP_S


def expected(index: int) -> dict:
    """The contract's figures for a seeded GPU, worked out by hand from the seed's pattern: every
    reading but the very first covers STEP_S seconds; the first is busy."""
    _slowdown, busy_h, busy_c, idle_c, busy_w, idle_w, fan, _dusty = seed.GPUS[index]
    readings = seed.DAYS * PER_DAY
    busy = seed.DAYS * busy_h * 3600 // seed.STEP_S - 1
    idle = readings - 1 - busy
    hot_c = _slowdown - 10
    return {
        "powered_h": (readings - 1) * seed.STEP_S / 3600,
        "busy_h": busy * seed.STEP_S / 3600,
        "hot_h": busy * seed.STEP_S / 3600 if busy_c >= hot_c else 0.0,
        "fan_high_h": busy * seed.STEP_S / 3600 if fan >= 80 else 0.0,
        # low at the first (busy) temperature, down to idle, then one cycle per later day's load
        "cycles": seed.DAYS - 1 if busy_c - idle_c >= 30 else 0,
        "energy_kwh": (busy * busy_w + idle * idle_w) * seed.STEP_S / 3.6e6,
    }


@pytest.fixture(scope="module")
def portal_server(tmp_path_factory):
    """A portal of this module's own: the fleet page ranks against the fleet's medians, which the
    other modules' GPUs (and the wear the pipeline keeps for them) would move."""
    from tests.browser.conftest import seeded_portal

    yield from seeded_portal(tmp_path_factory.mktemp("wear-e2e"))


@pytest.fixture(scope="module")
def wear_lab(portal_server):
    out = portal_server.manage("shell", "-c", "import json; from tests.wear.seed import wear_lab_seed; "
                               "print(json.dumps(wear_lab_seed()))").stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def test_fleet_wear_page_ranks_the_hard_worked_gpu_first(page, portal_server, login, screenshot, wear_lab):
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/wear/")
    expect(page.locator("h1")).to_have_text("Fleet wear")
    heavy, light = expected(0), expected(2)
    first = page.locator("table.table tbody tr").first
    cells = first.locator("td")
    expect(cells.nth(1)).to_have_text(f"{seed.HOST} #0")
    expect(cells.nth(4)).to_have_text(f"{heavy['hot_h']:.1f}")
    expect(cells.nth(5)).to_have_text(str(heavy["cycles"]))
    expect(cells.nth(6)).to_have_text(f"{heavy['busy_h']:.0f}")
    expect(cells.nth(7)).to_have_text(f"{heavy['fan_high_h']:.1f}")
    assert float(cells.nth(3).inner_text()) > 10  # hot, cycles and fan-high each capped at 5 past a 0 median
    light_row = page.locator("table.table tbody tr", has=page.locator("a", has_text=f"{seed.HOST} #2"))
    expect(light_row.locator("td").nth(6)).to_have_text(f"{light['busy_h']:.0f}")
    expect(light_row.locator("td").nth(5)).to_have_text("0")
    inspect = page.locator("ol.inspect-first li")
    expect(inspect.first).to_contain_text(f"{seed.HOST} #0")
    expect(inspect.first).to_contain_text(f"{heavy['cycles']} cycles")
    expect(page.locator("ol.inspect-first")).not_to_contain_text(f"{seed.HOST} #2")
    expect(page.locator("ol.inspect-first")).not_to_contain_text(f"{seed.HOST} #1")
    expect(first).to_have_class(re.compile("attention"))
    screenshot(page, "wear-fleet.png")
    # on a phone each GPU's name stays on one line ("sim-" / "rack-a" / "#0" was three); the table scrolls
    page.set_viewport_size({"width": 390, "height": 900})
    link = first.locator("td a")
    line = float(link.evaluate("el => parseFloat(getComputedStyle(el).lineHeight) || 24"))
    assert link.bounding_box()["height"] < 1.5 * line, link.bounding_box()
    page.set_viewport_size({"width": 1280, "height": 900})
    first.locator("td a").click()
    expect(page).to_have_url(re.compile(r"#wear$"))
    expect(page.locator("#wear h2")).to_have_text("Wear")


def _plot(page, element_id: str) -> dict:
    page.wait_for_function(f"() => document.getElementById('{element_id}')?.querySelector('.main-svg') !== null")
    return page.evaluate(
        f"(() => {{ const el = document.getElementById('{element_id}'); "
        "return {data: el.data, shapes: el.layout.shapes || [], annotations: el.layout.annotations || []}; })()"
    )


def test_gpu_wear_panel_shows_lifetimes_months_and_the_cleaning(page, portal_server, login, screenshot, wear_lab):
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/wear/")
    page.locator("table.table a", has_text=f"{seed.HOST} #0").click()
    page.wait_for_url(re.compile(r"/gpus/"))  # all_inner_texts below does not wait for the new page
    panel = page.locator("#wear")
    heavy = expected(0)
    totals = panel.locator("dl.wear-totals")
    expect(totals).to_be_visible()
    figures = dict(zip(totals.locator("dt").all_inner_texts(), totals.locator("dd").all_inner_texts(), strict=True))
    assert figures["Powered"] == f"{heavy['powered_h']:.0f} h"
    assert figures["Busy (≥ 90 % utilization)"] == f"{heavy['busy_h']:.0f} h"
    assert figures["Hot (≥ slowdown − 10 °C)"] == f"{heavy['hot_h']:.1f} h"
    assert figures["Fan high (≥ 80 %)"] == f"{heavy['fan_high_h']:.1f} h"
    assert figures["Thermal cycles (30 °C swings)"] == str(heavy["cycles"])
    assert figures["Energy"] == f"{heavy['energy_kwh']:.1f} kWh"
    start = dt.datetime.fromisoformat(wear_lab["start"])
    assert figures["Counted since"] == start.date().isoformat()

    monthly = _plot(page, "wear-monthly")
    months = sorted({(start + dt.timedelta(days=d)).strftime("%Y-%m") for d in range(seed.DAYS)})
    busy = next(trace for trace in monthly["data"] if trace["name"] == "busy h")
    assert busy["x"] == months
    assert math.isclose(sum(busy["y"]), heavy["busy_h"], abs_tol=0.01)
    cycles = next(trace for trace in monthly["data"] if trace["name"] == "thermal cycles")
    assert sum(cycles["y"]) == heavy["cycles"]
    expect(page.locator("#wear-monthly .bars path").first).to_be_visible()
    expect(page.locator("#wear-monthly .ytitle")).to_have_text("hours")
    expect(page.locator("#wear-monthly .y2title")).to_have_text("thermal cycles")
    ticks = page.locator("#wear-monthly .y2tick text").all_text_contents()
    assert ticks and all(re.fullmatch(r"\d+", tick) for tick in ticks), ticks  # whole cycles

    resistance = _plot(page, "wear-resistance")
    days, values = resistance["data"][0]["x"], resistance["data"][0]["y"]
    assert len(days) == seed.DAYS and days[0] == start.date().isoformat()
    # (busy °C − 25) / busy W: a degree more every second day of dust, back down after the cleaning
    busy_c, busy_w = seed.GPUS[0][2], seed.GPUS[0][4]
    before, after = seed.CLEANED_DAY - 1, seed.CLEANED_DAY
    assert values[before] == pytest.approx((busy_c + before // 2 - 25) / busy_w, abs=1e-4)
    assert values[after] == pytest.approx((busy_c - 25) / busy_w, abs=1e-4)
    assert max(values) == values[before] and values[before] > values[0]
    cleaned = dt.datetime.fromisoformat(wear_lab["cleaned_at"]).date().isoformat()
    assert [shape["x0"] for shape in resistance["shapes"]] == [cleaned]
    expect(page.locator("#wear-resistance .annotation-text", has_text="cleaning")).to_be_visible()
    expect(page.locator("#wear-resistance .ytitle")).to_have_text("°C per W")
    panel.scroll_into_view_if_needed()
    screenshot(page, "wear.png")
    panel.screenshot(path=str(page_path("wear-panel.png")))


def page_path(name: str):
    from tests.browser.conftest import ARTIFACTS

    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name
