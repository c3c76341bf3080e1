"""Browser harness: the real ASGI server (daphne) on a throwaway SQLite database with the demo
seed, driven by Debian's Chromium through Playwright. One server and one browser per session."""

import dataclasses
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@dataclasses.dataclass
class PortalServer:
    base_url: str
    credentials: dict[str, str]
    env: dict[str, str]
    var_dir: Path

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run another manage.py command against the server's database."""
        return _manage(self.env, *args, check=check)


def _manage(env, *args, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )
    if check and result.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_up(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the portal exited with {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the portal did not answer at {url} within {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="session")
def portal_server(tmp_path_factory):
    var_dir = tmp_path_factory.mktemp("e2e")
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(
        VAR_DIR=str(var_dir),
        DATABASE_URL=f"sqlite:///{var_dir}/e2e.sqlite3",  # always SQLite, whatever the suite runs on
        DJANGO_SETTINGS_MODULE="portal.settings",
        DEBUG="true",
        PYTHONUNBUFFERED="1",
    )
    _manage(env, "migrate", "--noinput", "-v", "0")
    seeded = _manage(env, "seed_demo").stdout
    credentials = dict(re.findall(r"^  (\w+)\s+(\S+)$", seeded, re.M))
    assert set(credentials) >= {"admin", "tech", "viewer"}, seeded

    port = _free_port()
    log = var_dir / "daphne.log"
    with open(log, "wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(base_url + "/healthz", server, log)
        yield PortalServer(base_url=base_url, credentials=credentials, env=env, var_dir=var_dir)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


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
    page.click("button[type=submit]")
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
