"""What a browser fetches for the GPU page, and how soon its first chart is drawn.

The portal as production serves it: `manage.py serve`, DEBUG off, static files collected by
WhiteNoise's compressed manifest storage (brotli and gzip next to each file, hashed names cached
for ten years), SQLite in a scratch VAR_DIR, a GPU with an hour of readings posted by an agent.
Debian's Chromium (Playwright) opens the GPU page `--runs` times, each in a fresh profile (nothing
cached). Counted: the bytes each response sent (its Content-Length, compressed, and its headers)
and the bytes after decoding, for the page's document, scripts and stylesheets, and for everything
it loads; the time from navigation to the first chart's SVG; and how long a browser may keep
plotly.js (its Cache-Control).

    .venv/bin/python bench/page_weight.py [--runs 5] [--mode production|demo|debug]

--mode demo measures the portal as `make demo` serves it (DEBUG and DEMO on: static files collected
as the demo's start does, hashed and compressed by portal.core.staticfiles); --mode debug as DEBUG
alone serves them (the source files, uncompressed: the demo before it served them compressed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import REPO, batch_body, host_inventory, ingest_post, machine_load, portal_served, reading  # noqa: E402

TARGET_MIB = 0.75  # the GPU page, its scripts and styles, transferred compressed
READINGS = 360  # an hour at 10 s
SETUP = """
from django.contrib.auth import get_user_model
from portal.accounts.services import user_set_role
user_set_role(user=get_user_model().objects.create_user("bench", password={password!r}), role="viewer")
"""


def _manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, str(REPO / "manage.py"), *args], cwd=REPO, env=env, check=True,
                            capture_output=True, text=True)  # fmt: skip
    return result.stdout


def _seed(env: dict[str, str], port: int) -> str:
    """An agent's hour of readings for one host of 8 GPUs; returns a GPU's uuid."""
    import http.client

    token = _manage(env, "issue_token", "bench-pages", "--label", "bench").strip().splitlines()[-1]
    inventory = host_inventory("bench-pages", 8)
    now = dt.datetime.now(dt.UTC)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for start in range(0, READINGS, 60):
        moments = [now - dt.timedelta(seconds=10 * (READINGS - step)) for step in range(start, start + 60)]
        rows = [reading(gpu["uuid"], moment, step) for step, moment in enumerate(moments) for gpu in inventory]
        status, answer = ingest_post(conn, token, batch_body("bench-pages", start, inventory, rows, now))
        if status not in (200, 202):
            raise SystemExit(f"ingest answered {status}: {answer[:300]!r}")
    return inventory[0]["uuid"]


def _measure(page, url: str) -> dict[str, float]:
    """What the page's loading fetched: each finished request's body as sent (compressed) with its
    response headers, and the decoded bodies."""
    responses, collecting = [], [True]
    page.on("requestfinished", lambda request: collecting[0] and responses.append(request))
    page.goto(url, wait_until="load")
    page.wait_for_function("window.__firstChart !== undefined", timeout=30_000)
    page.wait_for_load_state("networkidle")
    collecting[0] = False
    totals = {"code_transferred": 0, "code_decoded": 0, "all_transferred": 0, "all_decoded": 0,
              "requests": len(responses), "script_cache": ""}  # fmt: skip
    for request in responses:
        sizes, response = request.sizes(), request.response()
        body = _decoded_size(response)
        # On the wire: the body as sent (Content-Length of the encoding served; the decoded size
        # where the server streamed it without one) and the response's headers.
        sent = response.header_value("content-length") if response is not None else None
        transferred = (int(sent) if sent else body) + sizes["responseHeadersSize"]
        totals["all_transferred"] += transferred
        totals["all_decoded"] += body
        if "/plotly-cartesian." in request.url and response is not None:
            totals["script_cache"] = response.header_value("cache-control") or "none"
        if request.resource_type in ("document", "script", "stylesheet"):
            totals["code_transferred"] += transferred
            totals["code_decoded"] += body
    totals["first_chart_ms"] = page.evaluate("window.__firstChart")
    return totals


def _decoded_size(response) -> int:
    if response is None or response.status != 200:
        return 0
    try:
        return len(response.body())
    except Exception:  # a redirect's or a prefetch's body Chromium no longer holds
        return 0


FIRST_CHART = """
new MutationObserver((records, observer) => {
  if (document.querySelector('.js-plotly-plot .main-svg')) {
    window.__firstChart = performance.now();
    observer.disconnect();
  }
}).observe(document, {childList: true, subtree: true});
"""


def _browse(base_url: str, gpu_uuid: str, password: str, runs: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        cold = []
        for run in range(runs + 1):
            context = browser.new_context(base_url=base_url, viewport={"width": 1400, "height": 900})
            context.add_init_script(FIRST_CHART)
            page = context.new_page()
            page.goto("/login/")
            page.fill("#id_username", "bench")
            page.fill("#id_password", password)
            page.click("main button[type=submit]")
            page.wait_for_url(re.compile(r"^(?!.*/login/).*$"))
            if run == 0:
                page.goto(f"/gpus/{gpu_uuid}/")  # warms the server, not measured
                context.close()
                continue
            # Signing in landed on the fleet page, which loads plotly.js too: a cold GPU page
            # fetches it again (with DEBUG on a revalidation would answer 304 with no body).
            page.goto("about:blank")
            context.new_cdp_session(page).send("Network.clearBrowserCache")
            cold.append(_measure(page, f"/gpus/{gpu_uuid}/"))
            context.close()
        browser.close()
    return cold


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mode", choices=["production", "demo", "debug"], default="production")
    options = parser.parse_args()
    var_dir = Path(tempfile.mkdtemp(prefix="bench-pages-"))
    password = secrets.token_urlsafe(12)
    drop = {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(VAR_DIR=str(var_dir), DEBUG="false", SECRET_KEY=secrets.token_urlsafe(50), BURN_IN_LEVEL="0",
               ALLOWED_HOSTS="127.0.0.1,localhost", PLAIN_HTTP="true", LOG_LEVEL="WARNING")  # fmt: skip
    if options.mode != "production":
        env.update(DEBUG="true", DEMO="true" if options.mode == "demo" else "false")
    try:
        _manage(env, "migrate", "-v0")
        if options.mode == "production":
            _manage(env, "collectstatic", "--noinput", "-v0")
        elif options.mode == "demo":  # as `manage.py demo` collects them
            _manage(env, "shell", "-c", "from portal.core.staticfiles import static_collect; static_collect()")
        _manage(env, "shell", "-c", SETUP.format(password=password))
        with portal_served(env, log=var_dir / "portal.log", workers=1, timeout_s=120) as port:
            gpu_uuid = _seed({**env, "PORTAL_URL": f"http://127.0.0.1:{port}"}, port)
            cold = _browse(f"http://127.0.0.1:{port}", gpu_uuid, password, options.runs)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)

    def median(name: str) -> float:
        return statistics.median(run[name] for run in cold)

    mib = 1024 * 1024
    code_mib = median("code_transferred") / mib
    print(f"GPU page ({options.mode}), {options.runs} cold loads in a fresh Chromium profile (medians); "
          f"load {machine_load()}")  # fmt: skip
    print(f"{'':44}{'transferred':>14}{'decoded':>12}{'target':>10}")
    print(f"{'document, scripts, styles (MiB)':44}{code_mib:>14.3f}{median('code_decoded') / mib:>12.3f}"
          f"{'<= 0.75':>10}")  # fmt: skip
    print(f"{'everything the page loads (MiB)':44}{median('all_transferred') / mib:>14.3f}"
          f"{median('all_decoded') / mib:>12.3f}")  # fmt: skip
    print(f"{'first chart drawn after (ms)':44}{median('first_chart_ms'):>14.0f}")
    print(f"plotly.js kept by the browser: Cache-Control {cold[-1]['script_cache']}")
    ok = code_mib <= TARGET_MIB
    print(json.dumps({"cold": cold, "targets_met": ok}))
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
