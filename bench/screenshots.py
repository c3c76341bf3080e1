"""Screenshots of the main pages at 1400 and 390 px (docs/screenshots.md): the fleet, a GPU, a host,
a ticket, the reliability and usage reports, jobs, maintenance windows and spare parts.

A portal of its own on a scratch database with the demo seed (the browser tests' harness), ten
minutes of readings for dgx-01's first four GPUs, Debian's Chromium through Playwright, signed in
as admin. Each page is cut at MAX_HEIGHT px (the charts and tables above the fold, not the audit
trail), so the pictures stay small.

    .venv/bin/python bench/screenshots.py docs/screenshots
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.pop("DATABASE_URL", None)  # the harness's SQLite, never a shared database

MAX_HEIGHT = 2400
WIDTHS = (1400, 390)


def _shoot(page, path: Path, width: int) -> None:
    height = min(MAX_HEIGHT, page.evaluate("document.documentElement.scrollHeight"))
    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height})


def main() -> int:
    import django

    django.setup()
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, do_login, seeded_portal
    from tests.browser.readings import GPU_UUID, HOST, recent_minutes_post

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "test-artifacts/screenshots")
    out.mkdir(parents=True, exist_ok=True)
    for portal in seeded_portal(Path(tempfile.mkdtemp(prefix="screenshots-"))):
        recent_minutes_post(portal)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            for width in WIDTHS:
                context = browser.new_context(base_url=portal.base_url, viewport={"width": width, "height": 900})
                page = context.new_page()
                do_login(page, "admin", portal.credentials["admin"])
                page.goto("/tickets/")
                links = page.eval_on_selector_all("a[href^='/tickets/']", "els => els.map(e => e.getAttribute('href'))")
                ticket = next(link for link in links if re.fullmatch(r"/tickets/\d+/", link))
                for name, url, settle_ms in (
                    ("fleet", "/", 2500),
                    ("gpu", f"/gpus/{GPU_UUID}/", 3000),
                    ("host", f"/hosts/{HOST}/", 1500),
                    ("ticket", ticket, 1500),
                    ("report", "/reports/reliability", 1500),
                    ("usage", "/reports/usage", 2500),
                    ("jobs", "/jobs/", 1000),
                    ("windows", "/maintenance-windows/", 1000),
                    ("parts", "/inventory/stock/", 1000),
                ):
                    page.goto(url)
                    page.wait_for_timeout(settle_ms)  # live charts drawn, sockets connected
                    _shoot(page, out / f"{name}-{width}.png", width)
                context.close()
            browser.close()
    print(f"screenshots in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
