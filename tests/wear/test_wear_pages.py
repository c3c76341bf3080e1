"""The GPU page's Wear panel and the fleet wear page: what they show, and who may see them."""

import re

import pytest
from django.utils import timezone

from portal.demo.wear import wear_demo_seed
from portal.wear.selectors import fleet_wear_ranking, thermal_resistance_daily
from tests.factories import GpuFactory, HostFactory


@pytest.fixture
def demo_fleet(db):
    gpus = {}
    for hostname in ("sim-rack-b", "sim-desk-c"):
        host = HostFactory(hostname=hostname)
        for index in range(4):
            gpus[(hostname, index)] = GpuFactory(host=host, index=index, temp_slowdown_c=87)
    wear_demo_seed(now=timezone.now())
    return gpus


def test_the_dust_gpu_climbs_and_drops_after_its_cleaning(demo_fleet):
    series = thermal_resistance_daily(gpu=demo_fleet[("sim-rack-b", 0)])
    values = [point["c_per_w"] for point in series]
    cleaned = 40  # days into the 60-day history
    assert values[cleaned - 1] > values[0] * 1.4  # dust built up
    assert values[cleaned + 1] < values[cleaned - 1] * 0.8  # the cleaning worked
    assert wear_demo_seed() == 0  # idempotent


def test_gpu_page_shows_the_wear_panel(demo_fleet, client_for, viewer):
    gpu = demo_fleet[("sim-rack-b", 0)]
    page = client_for(viewer).get(gpu.get_absolute_url()).content.decode()
    assert 'id="wear"' in page and "Thermal cycles" in page and 'id="wear-data"' in page
    # the limits come from the code that counts (fleet.care, wear.meters), not from the template
    for label in ("Busy (≥ 90 % utilization)", "Hot (≥ slowdown − 10 °C)", "Fan high (≥ 80 %)",
                  "Thermal cycles (30 °C swings)"):  # fmt: skip
        assert label in page, label


def test_fleet_wear_page_ranks_and_names_who_to_inspect_first(demo_fleet, client_for, viewer):
    ranking = fleet_wear_ranking()
    assert ranking["rows"][0]["score"] >= ranking["rows"][-1]["score"]
    inspect = [row["gpu"].host.hostname for row in ranking["inspect_first"]]
    assert inspect and set(inspect) == {"sim-rack-b"}
    page = client_for(viewer).get("/wear/")
    assert page.status_code == 200 and "Inspect first" in page.content.decode()


@pytest.mark.django_db
def test_fleet_wear_page_roles(client_for, actors):
    assert client_for(actors["outsider"]).get("/wear/").status_code == 403
    assert client_for(None).get("/wear/").status_code == 302
    for role in ("viewer", "technician", "admin"):
        assert client_for(actors[role]).get("/wear/").status_code == 200


@pytest.mark.django_db
def test_spares_without_readings_do_not_lower_the_inspect_first_bar():
    import datetime as dt

    from portal.wear.models import WearState

    now = timezone.now()
    host = HostFactory(hostname="rank-lab")
    installed = (now - dt.timedelta(days=300)).date()
    for index, (hot_h, busy_h, cycles) in enumerate([(800, 800, 39), (0, 480, 0), (0, 160, 0)]):
        gpu = GpuFactory(host=host, index=index, install_date=installed)
        WearState.objects.create(gpu=gpu, last_ts=now, last_reading=[now.timestamp()], first_hour=now,
                                 hot_s=hot_h * 3600, busy_s=busy_h * 3600, cycles_total=cycles)  # fmt: skip
    spares = HostFactory(hostname="spares")
    for index in range(8):  # never reported: scored on age alone, well under the metered GPUs
        GpuFactory(host=spares, index=index, install_date=installed)
    ranking = fleet_wear_ranking(now=now)
    # metered scores: 5 + 5 + 800/480 + 1 (hot, cycles capped; busy; age), 2.0, 1.33: median 2.0
    assert ranking["median_score"] == 2.0
    assert [(row["gpu"].host.hostname, row["gpu"].index) for row in ranking["inspect_first"]] == [("rank-lab", 0)]


@pytest.mark.django_db
def test_old_gpus_without_readings_are_never_inspect_first_and_scores_read_alike(client_for, viewer):
    """Seeded GPUs installed years ago that never reported scored hundreds on age alone and topped
    "Inspect first"; a GPU without a reading has no score, is listed last, and every score has one
    decimal."""
    import datetime as dt

    from portal.wear.models import WearState

    now = timezone.now()
    host = HostFactory(hostname="young-lab")
    for index, busy_h in enumerate((300, 100, 110)):
        gpu = GpuFactory(host=host, index=index, install_date=(now - dt.timedelta(days=20)).date())
        WearState.objects.create(gpu=gpu, last_ts=now, last_reading=[now.timestamp()], first_hour=now,
                                 busy_s=busy_h * 3600)  # fmt: skip
    old = GpuFactory(host=HostFactory(hostname="old-spares"), index=0,
                     install_date=(now - dt.timedelta(days=5 * 365)).date())  # fmt: skip
    ranking = fleet_wear_ranking(now=now)
    assert old not in [row["gpu"] for row in ranking["inspect_first"]]
    assert ranking["rows"][-1]["gpu"] == old and ranking["rows"][-1]["score"] is None
    page = client_for(viewer).get("/wear/").content.decode()
    assert "no readings" in page
    scores = re.findall(r'<td class="num"><strong>([^<]+)</strong></td>', page)
    assert scores and all(re.fullmatch(r"\d+\.\d", score) for score in scores), scores


def test_counted_since_reads_in_the_portals_format_in_chinese(demo_fleet, client_for, viewer):
    # One date format in both languages (issue 48): ISO order, never Django's zh_Hans "2026年10月6日".
    gpu = demo_fleet[("sim-rack-b", 0)]
    page = client_for(viewer).get(gpu.get_absolute_url(), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    since = page.split('id="wear"', 1)[1].split("</dl>", 1)[0].rsplit("<dd>", 1)[1].strip().removesuffix("</dd>")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", since), since
