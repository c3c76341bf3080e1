"""The jobs pages in Chromium over the demo, with a job posted through ingest: the job list, a
job's page with its timeline drawn by our plotly bundle, at a desktop's and a phone's width."""

import datetime as dt
import re

import pytest
from playwright.sync_api import expect

from tests.browser.readings import gpu_uuid, host_token_issue, post_readings, reading

pytestmark = pytest.mark.browser


def test_the_job_list_and_a_job_page(page, portal_server, login, screenshot):
    # 20 minutes of dgx-01's GPUs 0 and 1 running slurm:9001, through the agents' ingest API
    token = host_token_issue(portal_server)
    now = dt.datetime.now(dt.UTC)
    readings = [
        {**reading(now - dt.timedelta(seconds=20 * n), 60 + n % 20), "gpu_uuid": gpu_uuid(g), "jobs": ["slurm:9001"]}
        for n in range(60) for g in (0, 1)
    ]  # fmt: skip
    post_readings(portal_server.base_url, token, readings)
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto("/jobs/")
    expect(page.locator("h1")).to_have_text(re.compile("Jobs"))
    first = page.locator("main table tbody tr td a").first
    expect(first).to_be_visible(timeout=60_000)
    first.click()
    expect(page.locator("#job-chart .main-svg").first).to_be_attached(timeout=20_000)
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(600)  # plotly's responsive redraw follows the resize
        box = page.locator("#job-chart .main-svg").first.bounding_box()
        assert box["width"] <= width, (width, box)
        screenshot(page, f"job-page-{width}.png")
    page.goto("/jobs/")
    screenshot(page, "job-list-390.png")
