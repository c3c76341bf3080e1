"""The Content-Security-Policy in Chromium: no page (logged in as admin or logged out, the
admin's included) raises a violation, and what used inline script still works under it."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

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
        assert (
            "script-src 'self'" in visit.csp_header
            and "unsafe-inline" not in visit.csp_header.split("script-src")[1].split(";")[0]
        ), visit.label
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
