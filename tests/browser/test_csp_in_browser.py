"""The Content-Security-Policy in Chromium: no page (logged in as admin or logged out, the
admin's included) raises a violation, scripts' or styles', and what used inline script or
inline styles (plotly.js's charts) still works under it."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.readings import recent_minutes_post
from tests.browser.site_walk import site_pages
from tests.portal_process import REPO

pytestmark = pytest.mark.browser

PLOTLY = REPO / "static" / "core" / "plotly-cartesian.min.js"
PLOTLY_TEMPLATE = REPO / "templates" / "core" / "_plotly.html"
GPU_UUID = "GPU-demo0000-0000-4000-8000-000000000000"  # dgx-01 #0 in the demo seed


def test_no_page_violates_the_policy(site_walk):
    names = {visit.name for visit in site_walk}
    assert {
        "fleet:fleet",
        "fleet:gpu",
        "fleet:host",
        "maintenance:ticket",
        "checklists:run",
        "admin:index",
        "admin:change",
        "login",
    } <= names
    for visit in site_walk:
        assert visit.status == 200, visit.label
        assert visit.content_type.startswith("text/html"), visit.label
    served = [visit for visit in site_walk if visit.csp_header]
    assert len(served) >= len(site_walk) - 1  # all but the login form shown again after its POST
    for visit in served:
        policy = {part.split()[0]: part.split()[1:] for part in visit.csp_header.split(";") if part.strip()}
        assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"], visit.label
    violations = {v.label: v.csp_events + v.csp_console for v in site_walk if v.csp_events or v.csp_console}
    assert not violations, violations


@pytest.fixture
def walk_page(browser, walk_server, site_walk):
    """A page on the walk's portal, where the walk made the objects (a ticket, checklist runs)."""
    context = browser.new_context(base_url=walk_server.base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def test_live_pages_draw_and_connect_under_the_policy(walk_page, walk_server, login):
    page = walk_page
    sockets = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.context.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', e => __csp.push(e.violatedDirective));"
    )
    login(page, "admin", walk_server.credentials["admin"])
    page.goto(f"/gpus/{GPU_UUID}/")
    expect(page.locator("#chart-temperature .main-svg").first).to_be_attached()
    expect(page.locator(".live-indicator[data-state=live]").first).to_be_attached()
    page.goto("/")
    expect(page.locator(".js-plotly-plot .main-svg").first).to_be_attached()
    expect(page.locator(".live-indicator[data-state=live]").first).to_be_attached()
    assert any(url.startswith("ws://") for url in sockets), sockets
    assert page.evaluate("window.__csp") == []


def test_former_inline_handlers_work(walk_page, walk_server, login):
    """The record form's kind switch and a run's Print button had inline handlers."""
    page = walk_page
    page.context.add_init_script("window.print = () => { window.__printed = true; };")
    login(page, "admin", walk_server.credentials["admin"])
    page.goto("/hosts/dgx-01/records/new/")
    other = page.locator("#kind-switch option:not([selected])").first.get_attribute("value")
    page.select_option("#kind-switch", other)
    expect(page).to_have_url(re.compile(rf"[?&]kind={other}\b"))
    expect(page.locator("#kind-switch")).to_have_value(other)

    page.goto("/checklists/runs/")
    page.locator("a[href^='/checklists/runs/']").first.click()
    page.get_by_role("button", name="Print").click()
    assert page.evaluate("window.__printed") is True


def test_the_policy_blocks_inline_code_and_the_violation_is_seen(walk_page):
    """A silent walk means something: injected inline code does not run, and its refusal raises the
    event the walk listens for."""
    page = walk_page
    page.context.add_init_script(
        "window.__csp = []; document.addEventListener('securitypolicyviolation', e => __csp.push(e.violatedDirective));"
    )
    page.goto("/login/")
    page.evaluate(
        """() => {
        window.__ran = 0;
        const script = document.createElement("script");
        script.textContent = "window.__ran += 1";
        document.body.appendChild(script);
        const button = document.createElement("button");
        button.setAttribute("onclick", "window.__ran += 1");
        document.body.appendChild(button);
        button.click();
    }"""
    )
    page.wait_for_function("window.__csp.length >= 2")
    assert page.evaluate("window.__ran") == 0
    assert set(page.evaluate("window.__csp")) == {"script-src-elem", "script-src-attr"}


LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  e => __csp.push([e.violatedDirective, e.sourceFile + ":" + e.lineNumber, e.sample]));
"""

# The page coordinates of a chart's middle data point (the middle non-empty cell of a heatmap),
# from plotly's own axes; null when the chart has nothing to hover.
POINT = """
(gd) => {
  const traces = gd._fullData.filter(t => t.visible === true);  // lines and cells before bars
  for (const trace of traces.filter(t => t.type !== "bar").concat(traces.filter(t => t.type === "bar"))) {
    const plot = gd._fullLayout._plots[trace.xaxis + trace.yaxis];
    let x, y;
    if (trace.type === "heatmap") {
      const cells = [];
      trace.z.forEach((row, r) => row.forEach((v, c) => {
        if (v != null) cells.push([trace.x ? trace.x[c] : c, trace.y ? trace.y[r] : r]);
      }));
      if (!cells.length) continue;
      [x, y] = cells[Math.floor(cells.length / 2)];
    } else {
      const points = (trace.x || []).map((xv, i) => [xv, trace.y[i]]).filter(p => p[1] != null);
      if (!points.length) continue;
      [x, y] = points[Math.floor(points.length / 2)];
    }
    const box = gd.querySelector(".main-svg").getBoundingClientRect();
    const px = box.left + plot.xaxis._offset + plot.xaxis.l2p(plot.xaxis.d2l(x));
    const py = box.top + plot.yaxis._offset + plot.yaxis.l2p(plot.yaxis.d2l(y));
    return {x: px, y: py + (trace.type === "bar" ? 2 : 0)};  // just inside a bar's top
  }
  return null;
}
"""

# Near the left end of a legend entry: a horizontal legend's right end can sit under the modebar.
LEGEND_SPOT = {"x": 6, "y": 15}


def chart_pages(portal) -> list[str]:
    """The pages of the walk that draw charts (walk_server has readings behind them)."""
    wanted = {"fleet:fleet", "fleet:gpu", "maintenance:ticket", "checklists:run"}
    return [entry["url"] for entry in site_pages(portal) if entry["name"] in wanted]


def test_charts_hover_modebar_and_legend_work_under_the_policy(walk_page, walk_server, login):
    """Plotly's own rules come from static/core/plotly.css, not from the <style> it would insert:
    hover labels show, the modebar sits over the chart, appears on hover and its buttons act, and
    a click on a legend entry hides its trace, with no CSP violation on the way."""
    page = walk_page
    page.context.add_init_script(LISTEN)
    # The session's walk_server posted its readings when it started, perhaps more than the
    # agent_silent rule's 5 minutes ago in a long run: the heatmap would grey every cell (nothing to hover).
    recent_minutes_post(walk_server, minutes=1)
    login(page, "admin", walk_server.credentials["admin"])
    hovered, modebars, legends = set(), 0, 0
    for url in chart_pages(walk_server):
        page.goto(url)
        charts = page.locator(".js-plotly-plot")
        if url == "/" or "/gpus/" in url:
            expect(charts.first).to_be_attached()
        page.wait_for_load_state("networkidle")
        for index in range(charts.count()):
            chart = charts.nth(index)
            name = f"{url} {chart.get_attribute('id')}"
            chart.scroll_into_view_if_needed()
            point = chart.evaluate(POINT)
            if point is not None:
                page.mouse.move(point["x"], point["y"])
                expect(chart.locator(".hoverlayer .hovertext").first, name).to_be_visible()
                hovered.add(chart.get_attribute("id"))
            modebar = chart.locator(".modebar")
            if modebar.count():
                modebars += 1
                assert modebar.evaluate("e => getComputedStyle(e).position") == "absolute", name  # over the chart
                group = modebar.locator(".modebar-group").first
                page.mouse.move(0, 0)  # off the chart: the modebar fades out ...
                page.wait_for_function("e => getComputedStyle(e).opacity === '0'", arg=group.element_handle())
                box = chart.bounding_box()
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.wait_for_function("e => getComputedStyle(e).opacity === '1'", arg=group.element_handle())
                zoom_in = modebar.locator(".modebar-btn[data-attr='zoom'][data-val='in']").first
                zoom_in.hover()  # ... its tooltip is the button's title
                assert zoom_in.evaluate("e => getComputedStyle(e, '::after').content") == '"Zoom in"', name
                # A mode button: the chart's drag mode turns to panning (live charts redraw their
                # ranges, but keep the mode).
                modebar.locator(".modebar-btn[data-attr='dragmode'][data-val='pan']").first.click()
                chart.evaluate("e => new Promise(r => setTimeout(r, 50))")
                assert chart.evaluate("e => e._fullLayout.dragmode") == "pan", name
                modebar.locator(".modebar-btn[data-attr='dragmode'][data-val='zoom']").first.click()
            toggle = chart.locator(".legend .traces .legendtoggle")
            if toggle.count():
                legends += 1
                toggle = toggle.first
                assert toggle.evaluate("e => getComputedStyle(e).cursor") == "pointer", name
                visible = "e => JSON.stringify(e._fullData.map(t => t.visible))"
                shown = chart.evaluate(visible)
                toggle.click(position=LEGEND_SPOT)
                page.wait_for_function(f"([e, shown]) => ({visible})(e) !== shown", arg=[chart.element_handle(), shown])
                page.wait_for_timeout(400)  # a second click within plotly's double-click delay would isolate
                toggle.click(position=LEGEND_SPOT)
                page.wait_for_function(f"([e, shown]) => ({visible})(e) === shown", arg=[chart.element_handle(), shown])
        assert page.evaluate("window.__csp") == [], url
    assert {"fleet-heatmap", "chart-temperature", "chart-power", "ticket-chart", "wear-monthly"} <= hovered, hovered
    assert modebars >= 7 and legends >= 6, (modebars, legends)


def test_plotly_stylesheets_hold_the_rules_plotly_would_insert(browser):
    """templates/core/_plotly.html links a file for each <style> element plotly.js inserts at load,
    under that element's id (so plotly leaves it alone), holding the same rules in the same order.
    After a plotly.js upgrade this fails with the rules to write into the files."""
    links = dict(
        re.findall(
            r'<link rel="stylesheet" id="([^"]+)"[^>]*href="{% static \'([^\']+)\' %}"', PLOTLY_TEMPLATE.read_text()
        )
    )
    page = browser.new_page()
    try:
        page.set_content("<!doctype html><html><head></head><body></body></html>")  # no policy, no links
        page.evaluate(PLOTLY.read_text() + "\n;0")
        inserted = page.evaluate(
            "() => Object.fromEntries(Array.from(document.querySelectorAll('style'),"
            " s => [s.id, Array.from(s.sheet.cssRules, r => r.cssText)]))"
        )
        assert set(links) == set(inserted), f"plotly.js inserts <style> elements with ids {sorted(inserted)}"
        for element_id, file in links.items():
            served = page.evaluate(
                "text => { const sheet = new CSSStyleSheet(); sheet.replaceSync(text);"
                " return Array.from(sheet.cssRules, r => r.cssText); }",
                (REPO / "static" / file).read_text(),
            )
            assert served == inserted[element_id], f"static/{file}: plotly.js inserts:\n" + "\n".join(
                inserted[element_id]
            )
    finally:
        page.close()
