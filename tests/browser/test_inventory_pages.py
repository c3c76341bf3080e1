"""The stock, warranties and RMA pages as a technician and an admin use them, in a real browser,
at a desk's width and a phone's: add a part, record a receipt and a use that leaves it low, record
a contract, open an RMA case and move it on; the GPU page shows the warranty and the case."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

WIDTHS = {"desk": 1400, "phone": 390}


def test_stock_warranty_and_rma_pages(page, portal_server, login, screenshot):
    creds = portal_server.credentials
    login(page, "admin", creds["admin"])
    page.goto("/inventory/stock/")
    page.fill("#id_part-name", "Fan module 92 mm")
    page.select_option("#id_part-kind", "fan")
    page.fill("#id_part-reorder_at", "2")
    page.fill("#id_part-location", "Shelf B2")
    page.click("#new-part button[type=submit]")
    expect(page.locator("main table").first).to_contain_text("Fan module 92 mm")
    for delta, reason in (("3", "received"), ("-2", "used")):
        page.select_option("#id_move-part", label="Fan module 92 mm")
        page.fill("#id_move-delta", delta)
        page.select_option("#id_move-reason", reason)
        page.click("#receipt button[type=submit]")
    expect(page.locator("main table").first).to_contain_text("low")

    page.goto("/hosts/dgx-02/")
    gpu_link = page.locator("a[href^='/gpus/GPU-']").first
    gpu_url = gpu_link.get_attribute("href")
    uuid = re.search(r"/gpus/([^/]+)/", gpu_url).group(1)
    page.goto("/inventory/warranties/")
    page.fill("#id_vendor", "Supermicro")
    page.fill("#id_contract", "SM-SVC-0917")
    page.select_option("#id_coverage", "parts_labour")
    page.fill("#id_starts_on", "2025-01-01")
    page.fill("#id_ends_on", "2029-01-01")
    page.fill("#id_gpus", uuid)
    page.click("#new-warranty button[type=submit]")
    expect(page.locator("main table").first).to_contain_text("SM-SVC-0917")

    page.goto("/inventory/rma/")
    page.fill("#id_gpu", uuid)
    page.fill("#id_vendor", "NVIDIA")
    page.fill("#id_case_number", "RMA-2026-0412")
    page.click("#open button[type=submit]")
    page.select_option("#id_state", "shipped")
    page.fill("#id_tracking", "1Z999AA10123456784")
    page.click("#transition button[type=submit]")
    expect(page.locator("main")).to_contain_text("1Z999AA10123456784")

    for url, name in ((gpu_url, "gpu"), ("/inventory/stock/", "stock"), ("/inventory/warranties/", "warranties"),
                      ("/inventory/rma/", "rma"), (page.url, "rma-case")):  # fmt: skip
        for label, width in WIDTHS.items():
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(url)
            screenshot(page, f"inventory-{name}-{label}.png")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(gpu_url)
    expect(page.locator("#warranty")).to_contain_text("Covered by Supermicro SM-SVC-0917")
    expect(page.locator("#warranty")).to_contain_text("RMA-2026-0412")
