"""Live pages in Chromium against daphne: readings posted through the ingest API show up on an
open GPU page's charts and on the fleet heatmap within 2 s; a cleaning shows on the charts."""

import datetime as dt
import re

import pytest
from playwright.sync_api import expect

from tests.browser.readings import GPU_UUID, host_token_issue, post_readings, reading

pytestmark = pytest.mark.browser

TEMPERATURE_LEN = "document.getElementById('chart-temperature').data[0].x.length"


@pytest.fixture(scope="module")
def host_token(portal_server):
    return host_token_issue(portal_server)


@pytest.fixture(scope="module")
def cleaning_history(portal_server, host_token):
    """Ten minutes of a hot GPU that a cleaning 5 minutes ago cooled down by ~20 °C."""
    now = dt.datetime.now(dt.UTC)
    cleaned_at = now - dt.timedelta(minutes=5)
    portal_server.manage(
        "shell",
        "-c",
        "import datetime as dt; from portal.fleet import services; from portal.fleet.models import Gpu; "
        f"gpu = Gpu.objects.get(uuid={GPU_UUID!r}); "
        f"services.record_create(kind='cleaning', host=gpu.host, gpu=gpu, performed_at=dt.datetime.fromisoformat("
        f"{cleaned_at.isoformat()!r}), performed_by='Li Wei', dust_level='heavy', airflow_ok=True)",
    )
    readings = []
    for second in range(600, 0, -5):
        ts = now - dt.timedelta(seconds=second)
        before = ts < cleaned_at
        temperature = (84 if before else 63) + (second // 5) % 3
        readings.append(reading(ts, temperature))
    post_readings(portal_server.base_url, host_token, readings)
    return cleaned_at


def test_gpu_page_charts_grow_live(page, portal_server, login, screenshot, host_token, cleaning_history):
    login(page, "tech", portal_server.credentials["tech"])
    page.goto(f"/gpus/{GPU_UUID}/")
    indicator = page.locator("#live-gpu .live-indicator")
    expect(indicator).to_have_attribute("data-state", "live")
    page.wait_for_function(f"() => {TEMPERATURE_LEN} >= 100")  # the history from the readings API
    before = page.evaluate(TEMPERATURE_LEN)
    markers = page.evaluate("document.getElementById('chart-temperature').layout.annotations.map(a => a.text)")
    assert any(text.startswith("Cleaning") for text in markers), markers

    post_readings(portal_server.base_url, host_token, [reading(dt.datetime.now(dt.UTC), 66)])
    page.wait_for_function(f"() => {TEMPERATURE_LEN} > {before}", timeout=2000)
    expect(page.locator('[data-now="temperature"]')).to_have_text("66 °C")
    page.wait_for_timeout(300)  # let Plotly finish drawing before the picture
    screenshot(page, "live-gpu.png")

    page.get_by_role("button", name="24 h").click()
    expect(page.locator("#live-range-note")).to_contain_text("History")
    screenshot(page, "live-gpu-24h.png")


def test_fleet_heatmap_updates_live(page, portal_server, login, screenshot, host_token, cleaning_history):
    # dgx-01 #1 and #2 each sent a reading taken ten minutes ago. #1's arrived just now (an agent
    # delivering its spool): not silent, as the agent_silent rule judges it. #2's arrived ten
    # minutes ago: silent. The other nine never reported: no data.
    replaying_gpu, quiet_gpu = (f"GPU-demo000{n}-0000-4000-8000-00000000000{n}" for n in (1, 2))
    ten_minutes_ago = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
    post_readings(portal_server.base_url, host_token, [reading(ten_minutes_ago, 50, gpu_uuid=replaying_gpu)])
    post_readings(portal_server.base_url, host_token, [reading(ten_minutes_ago, 51, gpu_uuid=quiet_gpu)])
    portal_server.manage(
        "shell",
        "-c",
        "import datetime as dt; from portal.telemetry.models import GpuLatest; "
        f"GpuLatest.objects.filter(gpu__uuid={quiet_gpu!r}).update(received_at=dt.datetime.fromisoformat("
        f"{ten_minutes_ago.isoformat()!r}))",
    )
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/")
    expect(page.locator("#live-fleet .live-indicator")).to_have_attribute("data-state", "live")
    expect(page.locator("#live-tickets .live-indicator")).to_have_attribute("data-state", "live")
    cell = "document.getElementById('fleet-heatmap').data[0].z[0][0]"  # dgx-01 is the first row, GPU 0
    post_readings(portal_server.base_url, host_token, [reading(dt.datetime.now(dt.UTC), 88)])
    page.wait_for_function(f"() => {cell} === 88", timeout=2000)
    expect(page.locator('[data-tile="hot"] [data-count]')).to_have_text("1")
    expect(page.locator('[data-tile="throttling"] [data-count]')).to_have_text("1")
    expect(page.locator('[data-tile="silent"] [data-count]')).to_have_text("1")
    # a silent GPU's entry names how long ago it was heard, not its last (stale) values
    expect(page.locator('[data-tile="silent"] a')).to_have_text(re.compile(r"^dgx-01 #2 · last seen \d+ min ago$"))
    heatmap_text = page.evaluate("document.getElementById('fleet-heatmap').data[0].text")
    assert heatmap_text[0][1:3] == ["50°", "silent"] and heatmap_text[1][0] == "no data", heatmap_text
    page.wait_for_timeout(300)
    screenshot(page, "live-fleet.png")

    page.locator('[data-tile="hot"] a').first.click()
    page.wait_for_url(f"**/{GPU_UUID}/")


def test_gpu_page_backfills_what_it_missed_while_disconnected(page, portal_server, login, host_token, cleaning_history):
    sockets = []

    def route(ws):  # pass the page's socket through to the server, keeping a handle to cut it
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket("**/ws/live/gpu/**", route)
    login(page, "tech", portal_server.credentials["tech"])
    page.goto(f"/gpus/{GPU_UUID}/")
    indicator = page.locator("#live-gpu .live-indicator")
    expect(indicator).to_have_attribute("data-state", "live")
    temperatures = "document.getElementById('chart-temperature').data[0].y"

    sockets[-1].close(code=1006, reason="network dropped")  # what a flaky Wi-Fi does
    expect(indicator).to_have_attribute("data-state", "reconnecting")
    now = dt.datetime.now(dt.UTC)
    post_readings(portal_server.base_url, host_token, [reading(now - dt.timedelta(seconds=1), 71), reading(now, 72)])
    assert 72 not in page.evaluate(temperatures)  # nobody told the page yet

    expect(indicator).to_have_attribute("data-state", "live", timeout=15_000)  # reconnected after the backoff
    page.wait_for_function(f"() => {temperatures}.includes(71) && {temperatures}.includes(72)", timeout=5_000)
    assert len(sockets) >= 2
