"""Browser harness: the real ASGI server (daphne) on a throwaway SQLite database with the demo
seed, driven by Debian's Chromium through Playwright. One server and one browser per session."""

import dataclasses
import re
from pathlib import Path

import pytest

from tests.browser.readings import recent_minutes_post
from tests.portal_process import REPO, PortalProcess, in_ci, manage, migrate, portal_env, running_portal

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@dataclasses.dataclass
class PortalServer(PortalProcess):
    credentials: dict[str, str] = dataclasses.field(default_factory=dict)


def seeded_portal(var_dir):
    """A portal on its own database with the demo seed, serving until the block ends."""
    env = portal_env(var_dir)
    migrate(env)
    seeded = manage(env, "seed_demo").stdout
    credentials = dict(re.findall(r"^  (\w+)\s+(\S+)$", seeded, re.M))
    assert set(credentials) >= {"admin", "tech", "viewer"}, seeded

    with running_portal(env, var_dir) as portal:
        yield PortalServer(**dataclasses.asdict(portal), credentials=credentials)


@pytest.fixture(scope="session")
def portal_server(tmp_path_factory):
    yield from seeded_portal(tmp_path_factory.mktemp("e2e"))


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium (`make browser`) to run the browser tests"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, portal_server):
    context = browser.new_context(base_url=portal_server.base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


def do_login(page, username: str, password: str) -> None:
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("main button[type=submit]")
    page.wait_for_url(re.compile(r"^(?!.*/login/).*$"))


def save_screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def login():
    """login(page, username, password): through the real login form."""
    return do_login


@pytest.fixture
def screenshot():
    """screenshot(page, name): a full-page PNG in test-artifacts/ (gitignored)."""
    return save_screenshot


@pytest.fixture(scope="session")
def walk_server(tmp_path_factory):
    """A portal of its own for the page walk: the walk adds a ticket and checklist runs that the
    other browser tests don't expect. dgx-01's first GPUs have ten minutes of readings, so the
    pages' charts and the fleet heatmap draw lines and colours, not empty axes."""
    for portal in seeded_portal(tmp_path_factory.mktemp("walk")):
        recent_minutes_post(portal)
        yield portal


@pytest.fixture(scope="session")
def site_walk(browser, walk_server):
    """Every page visited once logged in as admin and once logged out (tests/browser/site_walk.py):
    the CSP and accessibility tests read the same visits."""
    from tests.browser.site_walk import walk

    return walk(browser, walk_server, do_login)
