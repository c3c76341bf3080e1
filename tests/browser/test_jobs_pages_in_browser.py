"""The jobs pages in Chromium over the demo, with a job posted through ingest: the job list, a
job's page with its timeline drawn by our plotly bundle, at a desktop's and a phone's width."""

import datetime as dt
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import seeded_portal
from tests.browser.readings import gpu_uuid, host_token_issue, post_readings, reading

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def jobs_portal(tmp_path_factory):
    """A portal of its own: the readings posted here would otherwise be the newest of dgx-01's GPUs
    in the session's shared portal, whose live-page tests read their own."""
    yield from seeded_portal(tmp_path_factory.mktemp("jobs"))


def test_the_job_list_and_a_job_page(browser, jobs_portal, login, screenshot):
    # 20 minutes of dgx-01's GPUs 0 and 1 running slurm:9001, through the agents' ingest API
    token = host_token_issue(jobs_portal)
    now = dt.datetime.now(dt.UTC)
    readings = [
        {**reading(now - dt.timedelta(seconds=20 * n), 60 + n % 20), "gpu_uuid": gpu_uuid(g), "jobs": ["slurm:9001"]}
        for n in range(60) for g in (0, 1)
    ]  # fmt: skip
    post_readings(jobs_portal.base_url, token, readings)
    context = browser.new_context(base_url=jobs_portal.base_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    login(page, "viewer", jobs_portal.credentials["viewer"])
    page.goto("/jobs/")
    expect(page.locator("h1")).to_have_text(re.compile("Jobs"))
    first = page.locator("main table tbody tr td a").first
    expect(first).to_be_visible(timeout=60_000)
    first.click()
    expect(page.locator("#job-chart .main-svg").first).to_be_attached(timeout=20_000)
    # each GPU's mean utilisation with its unit, as the Figures panel writes it (the table wrote "82.9")
    rows = page.locator("main table tbody tr").filter(has_text="dgx-01 GPU")
    cells = rows.locator("td:nth-child(6)").all_inner_texts()
    assert len(cells) == 2 and all(re.fullmatch(r"\d+\.\d %", cell) for cell in cells), cells
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(600)  # plotly's responsive redraw follows the resize
        box = page.locator("#job-chart .main-svg").first.bounding_box()
        assert box["width"] <= width, (width, box)
        screenshot(page, f"job-page-{width}.png")
    # opened on a phone: the legend under the chart, which keeps a plot area to read (plotly had
    # squeezed it to ~150 x 115 px beside a scrolling legend, its time labels on end)
    page.reload()
    expect(page.locator("#job-chart .main-svg").first).to_be_attached(timeout=20_000)
    plot = page.locator("#job-chart .nsewdrag").first.bounding_box()
    legend = page.locator("#job-chart .legend").first.bounding_box()
    assert plot["width"] >= 220 and plot["height"] >= 150, plot
    assert legend["y"] >= plot["y"] + plot["height"], (legend, plot)
    screenshot(page, "job-page-390-loaded.png")
    page.goto("/jobs/")
    screenshot(page, "job-list-390.png")
    context.close()
