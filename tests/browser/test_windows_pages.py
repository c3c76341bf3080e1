"""The maintenance windows pages as a technician uses them, wide and on a phone: the form's bad
input shown by its field, a window planned, its page, the fleet page's panel."""

import datetime as dt

import pytest

pytestmark = [pytest.mark.browser]


def _local(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M")


@pytest.mark.parametrize("width", [1400, 390])
def test_plan_a_window(page, portal_server, login, screenshot, width):
    page.set_viewport_size({"width": width, "height": 900})
    login(page, "tech", portal_server.credentials["tech"])
    page.goto("/maintenance-windows/")
    start = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) + dt.timedelta(days=7 + (width == 390))
    page.fill("#id_title", 'Driver update, fans; "rack 4"')
    page.fill("#id_starts_at", _local(start))
    page.fill("#id_ends_at", _local(start - dt.timedelta(hours=1)))  # before the start
    page.fill("#id_hosts", "dgx-02 no-such-host")
    page.select_option("#id_checklist", "driver_update")
    page.click("#window-form button[type=submit]")
    assert page.locator("#id_ends_at_error").inner_text()
    assert "no-such-host" in page.locator("#id_hosts_error").inner_text()
    screenshot(page, f"windows-form-errors-{width}.png")

    page.fill("#id_ends_at", _local(start + dt.timedelta(hours=4)))
    page.fill("#id_hosts", "dgx-02")
    page.click("#window-form button[type=submit]")
    page.wait_for_url("**/maintenance-windows/*/")
    assert "dgx-02" in page.locator("#window-hosts").inner_text()
    screenshot(page, f"windows-detail-{width}.png")

    page.goto("/")
    assert "Driver update" in page.locator("#maintenance-windows").inner_text()
    screenshot(page, f"windows-fleet-{width}.png")
    page.goto("/maintenance-windows/")
    screenshot(page, f"windows-list-{width}.png")
