"""One walk over every page (tests/browser/site_pages.py), logged in as admin and logged out,
recording on each its Content-Security-Policy violations and, when axe-core is installed, what
axe-core finds against WCAG 2.1 A/AA. The CSP and accessibility tests share the walk."""

import contextlib
import dataclasses
import json
import re

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.portal_process import REPO

AXE = REPO / "node_modules" / "axe-core" / "axe.min.js"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]

# Registered before any page script runs, so violations raised while the page loads are kept.
LISTEN = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push({directive: e.violatedDirective, blocked: e.blockedURI,
                               source: e.sourceFile + ":" + e.lineNumber, sample: e.sample});
});
"""
AXE_RUN = """
async (tags) => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                       nodes: v.nodes.map(n => n.target.join(" ") + " — " + n.failureSummary)}));
}
"""


@dataclasses.dataclass
class PageVisit:
    name: str
    url: str
    logged_in: bool
    status: int
    content_type: str
    csp_header: str
    csp_events: list
    csp_console: list
    axe: list | None  # None: axe-core is not installed

    @property
    def label(self) -> str:
        return f"{self.url} ({'admin' if self.logged_in else 'logged out'})"


def site_pages(portal_server) -> list[dict]:
    out = portal_server.manage("shell", "-c", "from tests.browser.site_pages import print_pages; print_pages()").stdout
    return json.loads(re.search(r"^PAGES (.*)$", out, re.M).group(1))


def visit(page, entry: dict, console: list, axe_source: str | None, *, navigate: bool = True) -> PageVisit:
    """Open the page (or, with navigate=False, judge the one showing) and record what it shows."""
    if navigate:
        console.clear()
        response = page.goto(entry["url"], wait_until="load")
    else:
        response = None
    # Let the charts draw and the live feeds connect; a page that keeps fetching is judged as it stands.
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_load_state("networkidle", timeout=5_000)
    # The page's own violations, taken before axe-core runs: its CSSOM preload puts the text of
    # @import-ed stylesheets (the admin's) into <style> elements, which the policy refuses too.
    csp_events = page.evaluate("window.__cspViolations")
    csp_console = [m for m in console if "Content Security Policy" in m]
    axe = None
    if axe_source is not None:
        # Evaluated rather than added with add_script_tag: that inserts an inline <script>,
        # which this very policy refuses (and would report as a violation of its own).
        page.evaluate(axe_source + "\n;0")
        axe = page.evaluate(AXE_RUN, WCAG_TAGS)
    headers = response.headers if response else {}
    return PageVisit(
        name=entry["name"],
        url=entry["url"],
        logged_in=entry["logged_in"],
        status=response.status if response else 200,
        content_type=headers.get("content-type", "text/html"),
        csp_header=headers.get("content-security-policy", ""),
        csp_events=csp_events,
        csp_console=csp_console,
        axe=axe,
    )


def walk(browser, portal_server, login) -> list[PageVisit]:
    axe_source = AXE.read_text() if AXE.exists() else None
    entries = site_pages(portal_server)
    visits = []
    for logged_in in (False, True):
        context = browser.new_context(base_url=portal_server.base_url, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(15_000)
        context.add_init_script(LISTEN)
        page = context.new_page()
        console: list[str] = []
        page.on("console", lambda message, console=console: console.append(message.text))
        try:
            if logged_in:
                login(page, "admin", portal_server.credentials["admin"])
            for entry in entries:
                if entry["logged_in"] == logged_in:
                    visits.append(visit(page, entry, console, axe_source))
            if not logged_in:  # the login form showing its error
                console.clear()
                page.goto("/login/")
                page.fill("#id_username", "nobody")
                page.fill("#id_password", "not the password")
                page.click("main button[type=submit]")
                page.wait_for_load_state("load")
                entry = {"name": "login", "url": "/login/ (after a failed login)", "logged_in": False}
                visits.append(visit(page, entry, console, axe_source, navigate=False))
        finally:
            context.close()
    return visits
