"""A checklist on a phone (390×844, touch): My work, start from a host page, answers saved as
they are given, a photo from the "camera", sign-off; a completed run with automatic-item evidence
and its printed page (one A4 page, signature line)."""

import io
import re

import pytest
from PIL import Image
from playwright.sync_api import expect

from tests.browser.conftest import ARTIFACTS

pytestmark = pytest.mark.browser

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 2}

# A completed cleaning on dgx-01 whose "cooler afterwards" check was judged on readings from
# before and after it, and a pre-training check with its evidence (run in the portal's shell).
SEED_EVIDENCE = """
import datetime as dt
from django.contrib.auth import get_user_model
from django.utils import timezone
from portal.checklists import services
from portal.checklists.models import ChecklistRun
from portal.fleet.models import Host
from portal.telemetry.models import Reading

now = timezone.now()
host = Host.objects.get(hostname="dgx-01")
user = get_user_model().objects.get(username="tech")
user.first_name, user.last_name = "Li", "Wei"
user.save()
gpus = list(host.gpus.order_by("index"))
rows = []
for g, gpu in enumerate(gpus):
    for n in range(240):  # the week before: loaded, hot
        power = 450 + (n % 10) * 25
        rows.append(Reading(gpu=gpu, ts=now - dt.timedelta(days=2, minutes=n), power_w=power,
                            temperature_c=int(60 + power / 25 + g), utilization_gpu_pct=97, fan_speed_pct=70))
    for n in range(120):  # after the cleaning: cooler at the same power (GPU 3 barely)
        power = 450 + (n % 10) * 25
        drop = 1 if g == 3 else 6
        rows.append(Reading(gpu=gpu, ts=now - dt.timedelta(hours=3) + dt.timedelta(minutes=n), power_w=power,
                            temperature_c=int(60 + power / 25 + g - drop), utilization_gpu_pct=97, fan_speed_pct=65))
    for n in range(25):  # idle now
        rows.append(Reading(gpu=gpu, ts=now - dt.timedelta(minutes=25 - n), power_w=80, temperature_c=34 + g,
                            utilization_gpu_pct=0, fan_speed_pct=30 + n % 5 + (n > 12) * 10,
                            ecc_uncorrected_volatile=0, remapped_rows_pending=False))
Reading.objects.bulk_create(rows)
answers = [{"item": "dust_level", "value": "heavy", "note": "Felt on the intake filter."},
           {"item": "filters", "value": True}, {"item": "fans_spin", "value": "pass"},
           {"item": "airflow_path", "value": "pass"}, {"item": "heatsink_fins", "value": "pass"}]
run = services.run_start(template_key="cleaning", hostname="dgx-01", gpu_uuids=None, user=user)
ChecklistRun.objects.filter(pk=run.pk).update(started_at=now - dt.timedelta(hours=4))
run.refresh_from_db()
services.run_answer(run=run, answers=answers, user=user)
services.run_complete(run=run, signature="Li Wei", user=user, now=now - dt.timedelta(hours=3, minutes=30))
services.verifications_finish(now=now)
pre = services.run_start(template_key="pre_training", hostname="dgx-01", gpu_uuids=None, user=user)
services.run_answer(run=pre, answers=[{"item": "segments", "value": True}, {"item": "clocks", "value": "pass"},
                                      {"item": "checkpoint_hours", "value": 2}], user=user)
services.run_complete(run=pre, signature="Li Wei", user=user)
print("RUNS", run.pk, pre.pk)
"""


def png_bytes():
    buffer = io.BytesIO()
    Image.new("RGB", (320, 240), (120, 110, 90)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture
def phone(browser, portal_server):
    context = browser.new_context(base_url=portal_server.base_url, **PHONE)
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


def fits_the_width(page):
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_phone_run_from_start_to_sign_off(phone, portal_server, login, screenshot):
    page = phone
    login(page, "tech", portal_server.credentials["tech"])
    page.goto("/hosts/dgx-02/")
    page.get_by_role("link", name="Start checklist").click()
    page.locator("label", has_text="Cooling and dust cleaning").click()
    page.get_by_role("button", name="Start").click()
    expect(page).to_have_url(re.compile(r"/checklists/runs/\d+/$"))
    run_url = page.url
    expect(page.locator("h1")).to_contain_text("Cooling and dust cleaning")
    assert fits_the_width(page)

    # Touch targets: every answer button at least 44 px high (measured once the stylesheets have loaded).
    page.wait_for_load_state("load")
    heights = page.locator(".choices span").evaluate_all("els => els.map(e => e.getBoundingClientRect().height)")
    assert heights and min(heights) >= 44, heights

    dust = page.locator("#item-dust_level")
    dust.locator("label", has_text="Heavy").click()
    expect(dust.locator("[data-who]")).to_contain_text("saved ✓ tech")
    fans = page.locator("#item-fans_spin")
    fans.locator("label", has_text="Pass").click()
    expect(fans.locator("[data-who]")).to_contain_text("saved ✓")
    page.locator("#item-filters label", has_text="Yes").click()
    expect(page.locator("#item-filters [data-who]")).to_contain_text("saved ✓")
    note = page.locator("#item-heatsink_fins")
    note.locator("summary", has_text="Note").click()
    note.locator("textarea").fill("Two fins bent on GPU 2, straightened.")
    expect(note.locator("[data-who]")).to_contain_text("saved ✓")  # saved while typing (debounced)

    photo = page.locator("#item-photo_before")
    assert photo.locator("input[type=file]").get_attribute("capture") == "environment"
    photo.locator("input[type=file]").set_input_files(
        {"name": "dust.png", "mimeType": "image/png", "buffer": png_bytes()}
    )
    expect(photo.locator(".thumbs img")).to_have_count(1)
    photo.locator("input[type=file]").set_input_files({"name": "x.txt", "mimeType": "text/plain", "buffer": b"hello"})
    expect(photo.locator(".item-error")).to_contain_text("Not an image")
    expect(page.locator("#progress")).to_contain_text("5 of 8 answered")
    screenshot(page, "checklist-run-phone.png")

    # Sign-off refused while required items are open: each named, nothing completed.
    page.get_by_role("button", name="Complete and sign").click()
    expect(page.locator("#complete-error")).to_contain_text("Airflow path clear")
    expect(page.locator("#item-airflow_path .item-error")).to_be_visible()

    # Autosaved: a reload shows every answer.
    page.goto(run_url)
    expect(page.locator("#item-dust_level input[value=heavy]")).to_be_checked()
    expect(page.locator("#item-heatsink_fins textarea")).to_have_value("Two fins bent on GPU 2, straightened.")
    page.locator("#item-airflow_path label", has_text="Pass").click()
    expect(page.locator("#item-airflow_path [data-who]")).to_contain_text("saved ✓")
    page.locator("#item-heatsink_fins label", has_text="Pass").click()
    expect(page.locator("#item-heatsink_fins [data-who]")).to_contain_text("saved ✓")
    page.fill("#signature", "Tech Nician")
    page.get_by_role("button", name="Complete and sign").click()
    expect(page.locator(".done")).to_contain_text("signed “Tech Nician”")
    expect(page.locator(".state-badge")).to_have_text("Completed")
    expect(page.locator("#item-cooler_after .answer .res")).to_have_text(re.compile("verification pending|unknown"))
    expect(page.locator(".history")).to_contain_text("Dust level found")

    page.goto("/checklists/")
    expect(page.locator("#schedules")).to_be_visible()
    assert fits_the_width(page)
    screenshot(page, "checklist-my-work.png")


def test_completed_run_with_evidence_and_its_printed_page(page, portal_server, login, screenshot):
    out = portal_server.manage("shell", "-c", SEED_EVIDENCE).stdout
    cleaning_id, pre_id = re.search(r"RUNS (\d+) (\d+)", out).groups()
    login(page, "viewer", portal_server.credentials["viewer"])
    page.goto(f"/checklists/runs/{cleaning_id}/")
    cooler = page.locator("#item-cooler_after")
    expect(cooler.locator(".answer .res")).to_have_text("fail")  # GPU 3 only 1 °C cooler
    expect(cooler.locator(".evidence-table")).to_contain_text("°C cooler at equal power")
    expect(cooler.locator(".effect-chart .main-svg").first).to_be_visible()
    expect(page.locator("#complete")).to_have_count(0)  # a viewer, and a closed run
    screenshot(page, "checklist-run-evidence.png")

    page.goto(f"/checklists/runs/{pre_id}/")
    expect(page.locator("#item-idle_temperature .answer .res")).to_have_text("pass")
    expect(page.locator("#item-idle_temperature .evidence")).to_contain_text("idle median")
    expect(page.locator("#item-backup .evidence")).to_contain_text("last backup")
    screenshot(page, "checklist-pretraining-evidence.png")

    page.goto(f"/checklists/runs/{cleaning_id}/")
    page.emulate_media(media="print")
    expect(page.locator(".topbar")).to_be_hidden()
    expect(page.locator(".signature-lines")).to_be_visible()
    expect(page.locator(".signature-lines")).to_contain_text("Li Wei")
    screenshot(page, "checklist-run-print.png")
    pdf = page.pdf(format="A4", print_background=False)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "checklist-run-print.pdf").write_bytes(pdf)
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert pages == 1, f"the printed run takes {pages} pages"
