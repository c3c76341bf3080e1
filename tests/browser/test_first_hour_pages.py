"""What a lab admin meets in the first hour, in Chromium (issue 48, points 3 to 6): a silent GPU's
values look stale; the GPU page's charts break their lines at gaps, show XIDs, tickets and records
on the time axis, zoom by dragging with the range in the address, compare GPUs of a host, and keep
their labels apart; the layout holds at 1400 and 390 px; the ticket feed starts with the latest
changes in the page's time format.

One portal of its own (the demo seed): GPU 0 of dgx-01 has two stretches of readings with a gap
between them and an XID 79, GPU 1 was last heard 20 minutes ago (silent), GPUs 2 and 3 report."""

import datetime as dt
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import seeded_portal
from tests.browser.readings import gpu_uuid, host_token_issue, post_readings, reading

pytestmark = pytest.mark.browser

GAP_GPU, SILENT_GPU = gpu_uuid(0), gpu_uuid(1)
MAKE_SILENT = """
import datetime as dt
from portal.telemetry.models import GpuLatest
latest = GpuLatest.objects.get(gpu__uuid={uuid!r})
GpuLatest.objects.filter(pk=latest.pk).update(received_at=latest.ts)
"""
FIRE_TICKET = """
import datetime as dt
from django.utils import timezone
from portal.fleet.models import Gpu
from portal.maintenance.services.tickets import ticket_fire
gpu = Gpu.objects.get(uuid={uuid!r})
ticket_fire(rule="overheat", host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now() - dt.timedelta(hours=2), value=90)
"""


@pytest.fixture(scope="module")
def first_hour(tmp_path_factory):
    for portal in seeded_portal(tmp_path_factory.mktemp("first-hour")):
        token = host_token_issue(portal)
        now = dt.datetime.now(dt.UTC)
        rows = []
        for second in [*range(12 * 60, 8 * 60, -5), *range(4 * 60, 0, -5)]:  # a 4-minute outage between
            rows.append(reading(now - dt.timedelta(seconds=second), 62 + (second // 5) % 3, gpu_uuid=GAP_GPU))
            for index in (2, 3):
                rows.append(reading(now - dt.timedelta(seconds=second), 66 + 4 * index, gpu_uuid=gpu_uuid(index)))
        rows[0]["xid_events"] = [{"ts": rows[0]["ts"], "code": 79}]
        # the silent GPU: readings until 20 minutes ago, heard no later (set below: ingest stamps its arrival)
        rows += [reading(now - dt.timedelta(minutes=20, seconds=s), 64, gpu_uuid=SILENT_GPU) for s in range(60, 0, -5)]
        post_readings(portal.base_url, token, rows)
        portal.manage("shell", "-c", MAKE_SILENT.format(uuid=SILENT_GPU))
        portal.manage("shell", "-c", FIRE_TICKET.format(uuid=gpu_uuid(3)))  # a ticket two hours ago
        yield portal


def _page(browser, portal, login, width: int, user: str = "admin"):
    context = browser.new_context(base_url=portal.base_url, viewport={"width": width, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors
    login(page, user, portal.credentials[user])
    return page


def _charts_drawn(page):
    page.wait_for_function(
        "() => { const el = document.getElementById('chart-temperature');"
        " return el && el.data && el.data[0].x.length > 10; }",
        timeout=20_000,
    )


# 3. Stale values look stale ------------------------------------------------------------------


def test_a_silent_gpu_shows_its_last_values_greyed_with_their_age(browser, first_hour, login, screenshot):
    page = _page(browser, first_hour, login, 1400)
    page.goto(f"/gpus/{SILENT_GPU}/")
    expect(page.locator("#gpu-silent-badge")).to_be_visible()
    expect(page.locator("#gpu-silent-badge")).to_have_text("Silent")
    expect(page.locator("#gpu-status-badge")).to_be_hidden()
    expect(page.locator("[data-now=temperature]")).to_have_text("64 °C")
    expect(page.locator(".live-now")).to_have_class(re.compile(r"\bstale\b"))
    expect(page.locator("[data-now=age]")).to_contain_text(re.compile(r"last seen 2\d min ago"))
    grey = page.locator("[data-now=temperature]").evaluate("el => getComputedStyle(el).color")
    assert grey == "rgb(95, 104, 120)", grey  # the page's muted grey, not the text's black
    screenshot(page, "first-hour-silent-gpu.png")
    # a GPU that reports is not stale
    page.goto(f"/gpus/{gpu_uuid(2)}/")
    expect(page.locator("[data-now=age]")).to_contain_text(re.compile(r"\d+ s ago"))
    expect(page.locator("#gpu-status-badge")).to_be_visible()
    expect(page.locator("#gpu-silent-badge")).to_be_hidden()
    # the host's table and the fleet's Silent tile say the same
    page.goto("/hosts/dgx-01/")
    row = page.locator("#host-gpus tbody tr").nth(1)
    expect(row.locator(".badge")).to_have_text("Silent")
    expect(row.locator(".latest")).to_contain_text(re.compile(r"last seen 2\d\xa0minutes ago"))
    assert row.locator(".latest").evaluate("el => getComputedStyle(el).color") == "rgb(95, 104, 120)"
    page.goto("/")
    expect(page.locator('[data-tile="silent"] [data-list]')).to_contain_text(
        re.compile(r"dgx-01 #1 · last seen 2\d min")
    )
    assert page.errors == []
    page.context.close()


# 4. Charts -----------------------------------------------------------------------------------


def test_the_charts_break_at_gaps_and_name_xids_tickets_and_records(browser, first_hour, login):
    page = _page(browser, first_hour, login, 1400)
    page.goto(f"/gpus/{GAP_GPU}/")
    _charts_drawn(page)
    xs, ys = page.evaluate(
        "() => { const t = document.getElementById('chart-temperature').data[0]; return [t.x, t.y]; }"
    )
    gaps = [i for i, y in enumerate(ys) if y is None]
    assert len(gaps) == 1, gaps  # the 4-minute outage, and only it
    # the marker symbols on the time axis: hovering the XID names it
    markers = page.evaluate(
        "() => document.getElementById('chart-temperature').data.filter(t => t.yaxis === 'y2').map(t => t.text)"
    )
    assert any(text.startswith("XID 79") for text in markers[0]), markers
    index = next(i for i, text in enumerate(markers[0]) if text.startswith("XID 79"))
    page.evaluate(
        "index => { const el = document.getElementById('chart-temperature');"
        " Plotly.Fx.hover(el, [{curveNumber: el.data.findIndex(t => t.yaxis === 'y2'), pointNumber: index}]); }",
        index,
    )
    expect(page.locator("#chart-temperature .hoverlayer")).to_contain_text("XID 79")
    # a month's range shows the maintenance records and GPU 3's ticket
    page.goto(f"/gpus/{gpu_uuid(3)}/?range=30d")
    _charts_drawn(page)
    expect(page.locator("[data-range='30d']")).to_have_attribute("aria-pressed", "true")
    texts = page.evaluate(
        "() => document.getElementById('chart-power').data.filter(t => t.yaxis === 'y2').flatMap(t => t.text)"
    )
    assert any(text.startswith("Ticket #") for text in texts), texts
    assert any(text.startswith("Cleaning") for text in texts), texts
    assert page.errors == []
    page.context.close()


def test_the_xid_marker_speaks_the_page_language(browser, first_hour, login):
    page = _page(browser, first_hour, login, 1400)
    page.context.add_cookies([{"name": "django_language", "value": "zh-hans", "url": first_hour.base_url}])
    page.goto(f"/gpus/{GAP_GPU}/")
    _charts_drawn(page)
    texts = page.evaluate(
        "() => document.getElementById('chart-temperature').data.filter(t => t.yaxis === 'y2').flatMap(t => t.text)"
    )
    assert "XID 79：GPU 已从总线上掉线" in texts, texts
    assert not any("fallen off the bus" in text for text in texts), texts
    page.context.close()


def test_a_drag_zooms_every_chart_and_the_address_keeps_it(browser, first_hour, login):
    page = _page(browser, first_hour, login, 1400)
    page.goto(f"/gpus/{GAP_GPU}/")
    _charts_drawn(page)
    box = page.locator("#chart-power .nsewdrag").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=8)
    page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=8)
    page.mouse.up()
    expect(page).to_have_url(re.compile(r"\?from=[^&]+&to=[^&]+$"))
    page.wait_for_function("() => document.getElementById('live-range-note').textContent.includes('double-click')")
    ranges = page.evaluate(
        "() => ['chart-temperature', 'chart-power', 'chart-memory']"
        ".map(id => document.getElementById(id).layout.xaxis.range.map(v => String(v).slice(0, 19)))"
    )
    assert ranges[0] == ranges[1] == ranges[2], ranges  # the three charts show the chosen time
    # the address, opened again (shared), shows the same time; compared GPUs come along
    page.locator("[data-compare]").nth(1).check()  # GPU 2
    expect(page).to_have_url(re.compile(r"&gpus=GPU-demo0002"))
    url = page.url
    page.goto(url)
    _charts_drawn(page)
    assert (
        page.evaluate(
            "() => document.getElementById('chart-power').layout.xaxis.range.map(v => String(v).slice(0, 19))"
        )
        == ranges[1]
    )
    expect(page.locator("[data-compare]").nth(1)).to_be_checked()
    page.wait_for_function(
        "() => document.getElementById('chart-temperature').data.some(t => t.name === 'GPU 2' && t.x.length > 5)"
    )
    # a double-click goes back to the live range
    page.locator("#chart-power .nsewdrag").dblclick()
    expect(page).not_to_have_url(re.compile(r"from="))
    assert page.errors == []
    page.context.close()


def _overlaps(a, b) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and (b["y"] < a["y"] + a["height"])
    )


BOXES = """id => { const el = document.getElementById(id); const box = e => e.getBoundingClientRect().toJSON();
  const shown = e => e.textContent && e.getAttribute('display') !== 'none' && getComputedStyle(e).display !== 'none';
  return { x: [...el.querySelectorAll('.xtick text')].filter(shown).map(box),
           y: [...el.querySelectorAll('.ytick text')].filter(e => e.textContent).map(box),
           notes: [...el.querySelectorAll('.annotation-text')].map(box) }; }"""


@pytest.mark.parametrize("width", [1400, 390])
def test_no_axis_labels_collide_and_one_point_gets_a_sensible_axis(browser, first_hour, login, width):
    page = _page(browser, first_hour, login, width)
    page.goto(f"/gpus/{GAP_GPU}/")
    _charts_drawn(page)
    for chart in ("chart-temperature", "chart-power", "chart-utilization", "chart-fan", "chart-clocks", "chart-memory"):
        boxes = page.evaluate(BOXES, chart)
        for x_label in boxes["x"]:
            for other in boxes["y"] + boxes["notes"]:
                assert not _overlaps(x_label, other), (chart, x_label, other)
        for note in boxes["notes"]:
            for y_label in boxes["y"]:
                assert not _overlaps(note, y_label), (chart, note, y_label)
    # the wear panel of a new GPU (a day of meters): whole days on its time axis, nothing below zero
    page.wait_for_selector("#wear-resistance .xtick text")
    ticks = page.locator("#wear-resistance .xtick text").evaluate_all("els => els.map(e => e.textContent)")
    assert ticks and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", tick) for tick in ticks), ticks
    values = page.locator("#wear-resistance .ytick text").evaluate_all("els => els.map(e => e.textContent)")
    assert values and all(not value.startswith(("−", "-")) for value in values), values
    assert page.errors == []
    page.context.close()


# 5. Layout -----------------------------------------------------------------------------------


def test_the_host_page_gpu_table_fills_the_page(browser, first_hour, login, screenshot):
    page = _page(browser, first_hour, login, 1400)
    page.goto("/hosts/dgx-01/")
    table = page.locator("#host-gpus table").bounding_box()
    main = page.locator("main").bounding_box()
    assert table["width"] > 0.85 * main["width"], (table, main)
    clipped = page.evaluate(
        "() => [...document.querySelectorAll('#host-gpus th')].filter(th => th.scrollWidth > th.clientWidth + 1)"
        ".map(th => th.textContent)"
    )
    assert clipped == []
    lines = page.evaluate(
        "() => [...document.querySelectorAll('#host-gpus td:nth-child(2) a')].map(a => a.getClientRects().length)"
    )
    assert lines and max(lines) <= 2, lines  # a model name on one or two lines, never four
    screenshot(page, "first-hour-host-1400.png")
    page.context.close()


PHONE_PAGES = ["/", "/hosts/dgx-01/", f"/gpus/{GAP_GPU}/", "/tickets/", "/tickets/1/"]


def test_a_phone_gets_a_menu_and_nothing_clipped(browser, first_hour, login, screenshot):
    page = _page(browser, first_hour, login, 390)
    page.goto("/")
    expect(page.locator("nav.mainnav")).to_be_hidden()
    page.click(".nav-toggle")
    expect(page.locator("nav.mainnav")).to_be_visible()
    expect(page.locator(".nav-toggle")).to_have_attribute("aria-expanded", "true")
    page.click(".nav-toggle")
    expect(page.locator("nav.mainnav")).to_be_hidden()
    # host names on one line
    rects = page.evaluate(
        "() => [...document.querySelectorAll('#fleet-hosts td:first-child a')].map(a => a.getClientRects().length)"
    )
    assert rects and set(rects) == {1}, rects
    # the heatmap's cells: no label runs into its neighbour
    page.wait_for_selector("#fleet-heatmap .main-svg")
    labels = page.evaluate(
        "() => [...document.querySelectorAll('#fleet-heatmap .heatmaplayer text, #fleet-heatmap g.textpoint text')]"
        ".filter(e => e.textContent.trim()).map(e => ({text: e.textContent, ...e.getBoundingClientRect().toJSON()}))"
    )
    assert labels
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            assert not _overlaps(a, b), (a, b)
    for path in PHONE_PAGES:
        page.goto(path)
        page.wait_for_load_state("load")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
        # every table either fits or scrolls inside its card
        clipped = page.evaluate(
            """() => [...document.querySelectorAll('main table')].filter(t => {
                 const fits = t.getBoundingClientRect().right <= window.innerWidth + 1;
                 const scrolls = el => el && ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
                 let scroller = t;  // the table itself, its wrapper or its card scrolls sideways
                 while (scroller && scroller.tagName !== 'MAIN' && !scrolls(scroller)) {
                   scroller = scroller.parentElement;
                 }
                 return !fits && !(scroller && scroller.tagName !== 'MAIN');
               }).map(t => t.className || t.id || 'table')"""
        )
        assert clipped == [], (path, clipped)
    screenshot(page, "first-hour-ticket-390.png")
    page.context.close()


def test_the_comment_box_sits_under_its_label(browser, first_hour, login):
    page = _page(browser, first_hour, login, 1400)
    page.goto("/tickets/1/")
    label = page.locator("form label", has_text="Comment").bounding_box()
    box = page.locator("form textarea").bounding_box()
    assert abs(label["x"] - box["x"]) <= 2 and label["y"] + label["height"] <= box["y"] + 1, (label, box)
    page.context.close()


def test_the_login_forms_button_is_the_pages_first(browser, first_hour):
    context = browser.new_context(base_url=first_hour.base_url, viewport={"width": 390, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    first = page.locator("button[type=submit], input[type=submit]").first
    assert first.evaluate("b => b.form && b.form.querySelector('#id_username') !== null")
    expect(page.locator("form.language")).to_be_visible()  # still there, after the form
    context.close()


# 6. The ticket feed --------------------------------------------------------------------------


def test_the_ticket_feed_starts_with_the_latest_changes_in_the_pages_format(browser, first_hour, login):
    page = _page(browser, first_hour, login, 1400)
    page.goto("/")
    items = page.locator("#ticket-feed li[data-ticket-id]")
    expect(items.first).to_be_visible()
    assert 1 <= items.count() <= 10
    stamp = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}")
    assert all(stamp.fullmatch(text) for text in page.locator("#ticket-feed .when").all_inner_texts())
    # a change made now arrives on top, its time written the same way
    other = page.context.new_page()
    other.goto("/tickets/1/")
    other.click("form button:text-is('Acknowledge')")
    expect(page.locator("#ticket-feed li").first.locator(".badge")).to_have_text("acknowledged", timeout=20_000)
    expect(page.locator("#ticket-feed li").first.locator(".when")).to_have_text(stamp)
    assert page.errors == []
    page.context.close()
