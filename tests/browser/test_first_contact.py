"""What a newcomer meets first, in Chromium: the API docs render under the portal's CSP from its
own files, the Add hosts page's Copy button copies the install line, the search finds tickets,
an unknown address gets the portal's 404 page (the test portal runs with DEBUG on, as the demo),
and the portal has an icon."""

import re

import pytest
from playwright.sync_api import expect

from tests.portal_process import manage

pytestmark = pytest.mark.browser

CSP_WATCH = (
    "window.__csp = []; document.addEventListener('securitypolicyviolation',"
    " e => __csp.push(e.violatedDirective + ' ' + e.blockedURI));"
)


def watched(page):
    """The page's CSP violations (events and console lines) and the requests it sent elsewhere."""
    seen = {"console": [], "foreign": []}
    page.context.add_init_script(CSP_WATCH)
    page.on("console", lambda m: seen["console"].append(m.text) if m.type == "error" else None)
    page.on(
        "request",
        lambda r: seen["foreign"].append(r.url) if not r.url.startswith(("http://127.0.0.1", "data:")) else None,
    )
    return seen


@pytest.mark.parametrize("width", [1400, 390])
def test_the_api_docs_render_under_the_policy(browser, portal_server, login, screenshot, width):
    context = browser.new_context(base_url=portal_server.base_url, viewport={"width": width, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    seen = watched(page)
    login(page, "admin", portal_server.credentials["admin"])
    if width < 640:  # a phone: the navigation is behind the Menu button
        page.click(".nav-toggle")
    page.click("nav.mainnav >> text=API")
    expect(page).to_have_url(re.compile(r"/api/v1/docs$"))
    # Swagger UI (1.4 MB of script) and the document load on a busy test machine: a longer wait.
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("GPU Fleet Portal API", timeout=30_000)
    expect(page.locator(".swagger-ui .info .description")).to_contain_text("Authorization: Token")
    expect(page.locator(".opblock").first).to_be_visible()
    assert page.locator(".opblock").count() > 20
    # "Try it out" acts as the signed-in user (the session), CSRF token and all.
    hosts = page.locator(
        ".opblock-get", has=page.locator(".opblock-summary-path", has_text=re.compile(r"^/api/v1/hosts$"))
    )
    hosts.locator(".opblock-summary").click()
    page.locator(".try-out__btn").first.click()
    page.locator(".execute").first.click()
    expect(page.locator(".live-responses-table tbody .response-col_status").first).to_have_text("200", timeout=15_000)
    screenshot(page, f"api-docs-{width}.png")
    assert page.evaluate("window.__csp") == []
    assert not [line for line in seen["console"] if "Content Security Policy" in line], seen["console"]
    assert seen["foreign"] == []
    context.close()


@pytest.mark.parametrize("width", [1400, 390])
def test_the_copy_button_copies_the_install_line(browser, portal_server, login, screenshot, width):
    context = browser.new_context(
        base_url=portal_server.base_url,
        viewport={"width": width, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    seen = watched(page)
    login(page, "admin", portal_server.credentials["admin"])
    page.goto("/add-hosts/")
    # The test portal, like the demo, runs without PORTAL_URL on 127.0.0.1.
    expect(page.locator("#portal-url-unset")).to_contain_text("look for the portal on the GPU host itself")
    expect(page.locator("#prerequisites")).to_contain_text("systemd")
    # its form, and the ingest sources' one, laid out as every other form of the portal: each label
    # above its box, a required mark (they were Django's bare "Hostname: [box]" paragraphs)
    for url, field in (("/ingest-sources/", "#id_name"), ("/add-hosts/", "#id_hostname")):
        page.goto(url)
        label, box = page.locator(f"label[for={field[1:]}]"), page.locator(field)
        assert label.bounding_box()["y"] + label.bounding_box()["height"] <= box.bounding_box()["y"] + 1, url
        expect(page.locator(f".fields .field:has({field})")).to_be_visible()
    page.fill("#id_hostname", f"dgx-copy-{width}")
    page.click("main form button[type=submit] >> text=Make a code")
    line = page.locator("#install-command").inner_text()
    assert line.startswith("curl -fsSL http://127.0.0.1:")
    page.click("#copy-install-command")
    expect(page.locator("#copy-state")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == line
    screenshot(page, f"add-hosts-{width}.png")
    assert page.evaluate("window.__csp") == []
    assert seen["foreign"] == []
    context.close()


def test_search_finds_a_ticket_by_its_number_and_title(page, portal_server, login, screenshot):
    made = manage(
        portal_server.env, "shell", "-c",
        "from django.utils import timezone; from portal.fleet.models import Gpu; "
        "from portal.maintenance.services.tickets import ticket_fire; "
        "gpu = Gpu.objects.select_related('host').order_by('pk').first(); "
        "t, _ = ticket_fire(rule='overheat', host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=93); "
        "print('TICKET', t.pk, t.title)",
    ).stdout  # fmt: skip
    number, title = re.search(r"^TICKET (\d+) (.+)$", made, re.M).groups()
    login(page, "admin", portal_server.credentials["admin"])
    page.goto("/")
    ticket_link = page.locator(f'#search-tickets a[href="/tickets/{number}/"]').first

    def search_reaches_the_ticket(query):
        page.fill("header input[name=q]", query)
        page.press("header input[name=q]", "Enter")
        page.wait_for_load_state()
        # Straight to it when it is the only match, else listed among the others.
        assert page.url.endswith(f"/tickets/{number}/") or ticket_link.is_visible(), (query, page.url)

    search_reaches_the_ticket(f"#{number}")
    search_reaches_the_ticket(title[:12])
    search_reaches_the_ticket("dgx-01")  # hosts, GPUs, and the ticket whose title names the host
    expect(page.locator("#search-hosts")).to_be_visible()
    page.set_viewport_size({"width": 1400, "height": 900})
    screenshot(page, "search-1400.png")
    page.set_viewport_size({"width": 390, "height": 900})
    screenshot(page, "search-390.png")


def test_an_unknown_address_gets_the_portals_404_page(page, portal_server, login, screenshot):
    seen = watched(page)
    login(page, "admin", portal_server.credentials["admin"])
    response = page.goto("/no-such-page/")
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("Page not found")
    expect(page.locator("header.topbar")).to_be_visible()
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        screenshot(page, f"not-found-{width}.png")
    icon = page.request.get("/favicon.ico")
    assert icon.ok and icon.headers["content-type"] in {"image/x-icon", "image/vnd.microsoft.icon"}
    assert page.evaluate("window.__csp") == []
    assert seen["foreign"] == []
