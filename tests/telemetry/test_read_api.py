"""The read API: hosts, GPUs, a GPU's readings at the right resolution, maintenance records, and
who may read them (session or personal token; anonymous 401 JSON; no role 403)."""

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from portal.accounts.services import api_token_issue, api_token_revoke
from portal.fleet.models import Gpu, MaintenanceRecord
from portal.telemetry.models import THROTTLE_BIT, Reading, Rollup1h, Rollup1m
from tests.factories import GpuFactory, HostFactory, RecordFactory
from tests.pipeline import batches_recorded, stage_run
from tests.telemetry.batches import gpu_uuid, iso, make_batch

pytestmark = pytest.mark.django_db

A, B = gpu_uuid(1), gpu_uuid(2)
ENDPOINTS = ["/api/v1/hosts", "/api/v1/gpus", f"/api/v1/gpus/{A}", f"/api/v1/gpus/{A}/readings", "/api/v1/records"]


@pytest.fixture
def fleet(agent, other_agent):
    """dgx-07 with GPUs A and B and 20 readings (through the ingest API), dgx-99 with one GPU."""
    now = timezone.now().replace(microsecond=0)
    batch = make_batch(agent.hostname, gpus=[A, B], readings=20, now=now, step=dt.timedelta(seconds=10))
    batch["readings"][-2]["throttle_reasons"] = ["hw_thermal", "sw_power_cap"]
    assert agent.post(batch).status_code == 202
    assert other_agent.post(make_batch(other_agent.hostname, gpus=[gpu_uuid(9)])).status_code == 202
    return {"now": now, "batch": batch}


@pytest.fixture
def api(viewer):
    client = Client()
    client.force_login(viewer)
    return client


# --- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ENDPOINTS)
def test_anonymous_gets_401_json_not_a_login_redirect(fleet, url):
    response = Client().get(url)
    assert response.status_code == 401
    assert response["Content-Type"].startswith("application/json")
    assert "error" in response.json()


@pytest.mark.parametrize("url", ENDPOINTS)
def test_who_may_read(fleet, actors, client_for, url):
    for name in ("admin", "technician", "viewer"):
        assert client_for(actors[name]).get(url).status_code == 200, name
    response = client_for(actors["outsider"]).get(url)
    assert response.status_code == 403
    assert "error" in response.json()


def test_personal_token_works_and_a_revoked_one_does_not(fleet, viewer, outsider):
    secret, token = api_token_issue(user=viewer)
    response = Client().get("/api/v1/gpus", HTTP_AUTHORIZATION=f"Token {secret}")
    assert response.status_code == 200
    assert response.json()["count"] == 3
    for header in (f"Bearer {secret}", f"token {secret}", "Token gfu_wrong", f"Token {secret}x"):
        assert Client().get("/api/v1/gpus", HTTP_AUTHORIZATION=header).status_code == 401, header
    api_token_revoke(token=token)
    assert Client().get("/api/v1/gpus", HTTP_AUTHORIZATION=f"Token {secret}").status_code == 401
    # an outsider's token authenticates, but the role is missing
    outsider_secret, _ = api_token_issue(user=outsider)
    assert Client().get("/api/v1/gpus", HTTP_AUTHORIZATION=f"Token {outsider_secret}").status_code == 403


def test_host_token_is_not_a_personal_token(fleet, agent):
    for header in (f"Token {agent.token}", f"Bearer {agent.token}"):
        assert Client().get("/api/v1/hosts", HTTP_AUTHORIZATION=header).status_code == 401


def test_session_login_through_the_login_page_works(fleet, viewer):
    from tests.factories import PASSWORD

    client = Client()
    assert client.post("/login/", {"username": viewer.username, "password": PASSWORD}).status_code == 302
    assert client.get("/api/v1/hosts").status_code == 200


# --- hosts and GPUs -------------------------------------------------------------------------


def test_hosts_list(fleet, api, agent):
    body = api.get("/api/v1/hosts").json()
    assert body["count"] == 2
    first = body["items"][0]
    assert (first["hostname"], first["driver_version"], first["agent_version"]) == ("dgx-07", "580.65.06", "0.1.0")
    assert [h["hostname"] for h in api.get("/api/v1/hosts", {"q": "99"}).json()["items"]] == ["dgx-99"]
    assert api.get("/api/v1/hosts", {"status": "retired"}).json()["count"] == 0
    assert api.get("/api/v1/hosts", {"status": "bogus"}).status_code == 400
    assert api.get("/api/v1/hosts", {"limit": 1}).json()["items"][0]["hostname"] == "dgx-07"


def test_gpus_list_and_detail_with_latest_state(fleet, api):
    body = api.get("/api/v1/gpus", {"host": "dgx-07"}).json()
    assert [g["uuid"] for g in body["items"]] == [A, B]
    detail = api.get(f"/api/v1/gpus/{B}").json()
    assert (detail["uuid"], detail["hostname"], detail["index"], detail["model_name"]) == (
        B,
        "dgx-07",
        1,
        "NVIDIA H200",
    )
    latest = detail["latest"]
    assert latest["temperature_c"] == 64 and latest["fan_speed_pct"] is None
    assert latest["power_w"] == pytest.approx(412.25)
    assert dt.datetime.fromisoformat(latest["ts"]) == fleet["now"]
    assert api.get(f"/api/v1/gpus/{A}").json()["latest"]["throttle_reasons"] == ["sw_power_cap", "hw_thermal"]
    # a GPU that never reported has no latest state
    GpuFactory(uuid="GPU-quiet")
    assert api.get("/api/v1/gpus/GPU-quiet").json()["latest"] is None
    assert api.get("/api/v1/gpus/GPU-nope").status_code == 404
    assert api.get("/api/v1/gpus", {"model": "h200"}).json()["count"] == 3
    assert api.get("/api/v1/gpus", {"status": "retired"}).json()["count"] == 0


def test_gpus_list_runs_a_constant_number_of_queries(fleet, api, django_assert_max_num_queries):
    host = HostFactory()
    for index in range(10):
        GpuFactory(host=host, index=index)
    with django_assert_max_num_queries(8):
        assert api.get("/api/v1/gpus", {"limit": 100}).json()["count"] == 13


# --- readings -------------------------------------------------------------------------------


def readings(api, uuid=A, **params):
    return api.get(f"/api/v1/gpus/{uuid}/readings", params)


def test_raw_readings_for_a_short_span(fleet, api):
    now = fleet["now"]
    response = readings(
        api, **{"from": iso(now - dt.timedelta(minutes=5)), "to": iso(now + dt.timedelta(seconds=1)),
                "metrics": "temperature_c,fan_speed_pct,throttle_reasons,power_w"},
    )  # fmt: skip
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["gpu"], body["resolution"]) == (A, "raw")
    sent = [r for r in fleet["batch"]["readings"] if r["gpu_uuid"] == A]
    assert [dt.datetime.fromisoformat(ts) for ts in body["ts"]] == [
        dt.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")) for r in sent
    ]
    assert body["values"]["temperature_c"] == [64] * 10
    assert body["values"]["fan_speed_pct"] == [None] * 10  # null stays null
    assert body["values"]["throttle_reasons"][-1] == ["sw_power_cap", "hw_thermal"]
    assert body["values"]["throttle_reasons"][0] == ["sw_power_cap"]
    assert body["values"]["power_w"] == pytest.approx([412.25] * 10)
    assert set(body["values"]) == {"temperature_c", "fan_speed_pct", "throttle_reasons", "power_w"}
    # [from, to): 'to' excludes the reading exactly at it
    assert len(readings(api, **{"from": iso(now - dt.timedelta(minutes=5)), "to": iso(now)}).json()["ts"]) == 9


def test_defaults_are_the_last_hour_and_the_default_metrics(fleet, api):
    body = readings(api).json()
    assert body["resolution"] == "raw"
    assert len(body["ts"]) == 10
    assert set(body["values"]) == {"temperature_c", "power_w", "utilization_gpu_pct", "fan_speed_pct"}


@pytest.fixture
def long_series(fleet):
    """3,000 readings of GPU A, one every 30 s over 25 hours ending 5 min ago, with rollups."""
    gpu = Gpu.objects.get(uuid=A)
    end = fleet["now"] - dt.timedelta(minutes=5)
    start = end - dt.timedelta(seconds=30 * 3000)
    stored = Reading.objects.bulk_create(
        [Reading(gpu=gpu, ts=start + dt.timedelta(seconds=30 * i), temperature_c=40 + i % 30,
                 throttle_reasons=THROTTLE_BIT["hw_thermal"] if i % 10 == 0 else 0) for i in range(3000)],
        batch_size=500,
    )  # fmt: skip
    batches_recorded(stored)
    stage_run("rollups")
    return {"start": start, "end": end, "gpu": gpu}


def test_auto_resolution_picks_rollups_for_long_spans_with_many_points(long_series, api):
    start, end = long_series["start"], long_series["end"]
    # 25 h of 30 s readings: over 2,000 raw points, and 1,500 minutes fit: 1-minute rollups
    body = readings(api, **{"from": iso(start), "to": iso(end), "metrics": "temperature_c"}).json()
    assert body["resolution"] == "1m"
    minutes = list(Rollup1m.objects.filter(gpu=long_series["gpu"], bucket__gte=start - dt.timedelta(minutes=1),
                                           bucket__lt=end).order_by("bucket"))  # fmt: skip
    assert len(body["ts"]) == len(minutes) > 1400
    assert body["values"]["temperature_c"] == [round(m.temperature_c_mean, 2) for m in minutes]
    assert body["min"]["temperature_c"] == [m.temperature_c_min for m in minutes]
    assert body["max"]["temperature_c"] == [m.temperature_c_max for m in minutes]
    # a span of 3 days with many points: more than 2,000 minutes, so hours
    body = readings(api, **{"from": iso(end - dt.timedelta(days=3)), "to": iso(end), "metrics": "temperature_c"}).json()
    assert body["resolution"] == "1h"
    # Every hour bucket that begins before 'to' (the hour holding 'from' included); which hours
    # those are depends on where the clock stands in the hour, so they are read, not counted.
    hours = list(
        Rollup1h.objects.filter(gpu=long_series["gpu"], bucket__lt=end)
        .order_by("bucket")
        .values_list("bucket", flat=True)
    )
    assert [dt.datetime.fromisoformat(ts) for ts in body["ts"]] == hours
    assert len(hours) >= 25
    # a short span of the same GPU is still raw
    body = readings(api, **{"from": iso(end - dt.timedelta(minutes=30)), "to": iso(end)}).json()
    assert body["resolution"] == "raw"
    assert len(body["ts"]) == 60


def test_explicit_resolution(long_series, api):
    end = long_series["end"]
    span = {"from": iso(end - dt.timedelta(hours=2)), "to": iso(end), "metrics": "temperature_c,power_w"}
    raw = readings(api, resolution="raw", **span).json()
    assert (raw["resolution"], len(raw["ts"]), raw["min"]) == ("raw", 240, None)
    minute = readings(api, resolution="1m", **span).json()
    assert minute["resolution"] == "1m" and 120 <= len(minute["ts"]) <= 121
    assert set(minute["min"]) == {"temperature_c", "power_w"}
    assert all(v is None for v in minute["values"]["power_w"])  # no power reported: null, not 0
    hour = readings(api, resolution="1h", **span).json()
    assert hour["resolution"] == "1h" and 2 <= len(hour["ts"]) <= 3


def test_every_answer_is_bounded_whatever_the_resolution(long_series, api, settings):
    """1-minute rollups over a year, or raw readings over a long span, would be unbounded: past
    READINGS_MAX_POINTS points the answer is a 400 naming from and resolution, with a way out."""
    end = long_series["end"]
    year = {"from": iso(end - dt.timedelta(days=365)), "to": iso(end), "metrics": "temperature_c"}
    refused = readings(api, resolution="1m", **year)
    assert refused.status_code == 400
    detail = {item["loc"]: item["msg"] for item in refused.json()["detail"]}
    assert set(detail) == {"from", "resolution"} and "10,000" in refused.json()["error"]
    assert "resolution=1h" in detail["resolution"]
    # The latest 'from' it names is accepted, and holds at most the bound.
    latest_from = detail["from"].split("'from' at ")[1].split(" or later")[0]
    fits = readings(api, resolution="1m", **{**year, "from": latest_from})
    assert fits.status_code == 200 and len(fits.json()["ts"]) <= 10_000
    assert readings(api, resolution="1h", **year).status_code == 200
    assert readings(api, **year).json()["resolution"] == "1h"  # auto coarsens by itself
    # Raw: counted, never cut off silently.
    settings.READINGS_MAX_POINTS = 1000
    whole = {"from": iso(long_series["start"]), "to": iso(end + dt.timedelta(seconds=1)), "metrics": "temperature_c"}
    refused = readings(api, resolution="raw", **whole)
    assert refused.status_code == 400 and "resolution=1m" in refused.json()["detail"][1]["msg"]
    short = {**whole, "from": iso(end - dt.timedelta(seconds=30 * 999))}
    assert 990 <= len(readings(api, resolution="raw", **short).json()["ts"]) <= 1000


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "2026-12-02T10:00:00Z", "to": "2026-12-02T09:00:00Z"}, "from"),
        ({"from": "2026-12-02T10:00:00Z", "to": "2026-12-02T10:00:00Z"}, "from"),
        ({"metrics": "temperature_c,bogus"}, "metrics"),
        ({"metrics": " , "}, "metrics"),
        ({"metrics": "pstate", "resolution": "1m"}, "metrics"),
        ({"from": "2026-12-02T10:00:00", "to": "2026-12-02T11:00:00Z"}, "from"),
        ({"to": "2026-12-02T11:00:00"}, "to"),
        ({"from": "yesterday"}, "from"),
        ({"resolution": "5m"}, "resolution"),
        ({"resolution": "RAW"}, "resolution"),
        ({"from": "2020-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "from"),
    ],
    ids=["from-after-to", "empty-span", "unknown-metric", "no-metric", "metric-not-rolled-up", "naive-from",
         "naive-to", "not-a-date", "bad-resolution", "resolution-case", "span-too-long"],
)  # fmt: skip
def test_bad_readings_queries_are_400_naming_the_field(fleet, api, params, field):
    response = readings(api, **params)
    assert response.status_code == 400, response.content
    body = response.json()
    named = [item["loc"] for item in body.get("detail") or []] + [body["error"]]
    assert any(field in text for text in named), body


def test_readings_of_an_unknown_gpu_is_404(fleet, api):
    assert readings(api, uuid="GPU-nope").status_code == 404


# --- records --------------------------------------------------------------------------------


def test_records_list_and_filters(fleet, api):
    gpu = Gpu.objects.get(uuid=A)
    cleaning = RecordFactory(gpu=gpu, performed_at=timezone.now() - dt.timedelta(days=3))
    other = RecordFactory(gpu=Gpu.objects.get(uuid=gpu_uuid(9)), performed_at=timezone.now() - dt.timedelta(days=1))

    body = api.get("/api/v1/records").json()
    assert [r["id"] for r in body["items"]] == [other.pk, cleaning.pk]
    item = body["items"][1]
    assert (item["kind"], item["hostname"], item["gpu_uuid"], item["performed_by"]) == (
        "cleaning",
        "dgx-07",
        A,
        "Li Wei",
    )
    assert item["details"]["dust_level"] == "light"
    assert [r["id"] for r in api.get("/api/v1/records", {"host": "dgx-07"}).json()["items"]] == [cleaning.pk]
    assert [r["id"] for r in api.get("/api/v1/records", {"gpu": gpu_uuid(9)}).json()["items"]] == [other.pk]
    assert api.get("/api/v1/records", {"kind": "repair"}).json()["count"] == 0
    since = iso(timezone.now() - dt.timedelta(days=2))
    assert [r["id"] for r in api.get("/api/v1/records", {"since": since}).json()["items"]] == [other.pk]
    assert [r["id"] for r in api.get("/api/v1/records", {"until": since}).json()["items"]] == [cleaning.pk]


def test_agent_records_are_listed_as_such(fleet, agent, api):
    assert agent.post(make_batch(agent.hostname, gpus=[A], host={"driver_version": "590.1"})).status_code == 202
    items = api.get("/api/v1/records", {"kind": "driver_update"}).json()["items"]
    assert len(items) == 1
    assert (items[0]["performed_by"], items[0]["gpu_uuid"]) == ("agent", None)
    assert items[0]["details"] == {"from_version": "580.65.06", "to_version": "590.1"}
    assert MaintenanceRecord.objects.count() == 1


@pytest.mark.parametrize("params", [{"kind": "bogus"}, {"since": "last week"}, {"limit": -1}])
def test_bad_records_filter_is_400(fleet, api, params):
    response = api.get("/api/v1/records", params)
    assert response.status_code == 400
    assert [item["loc"] for item in response.json()["detail"]] == list(params)


@pytest.mark.parametrize("path", ["/api/v1/hosts", "/api/v1/gpus", "/api/v1/records"])
@pytest.mark.parametrize("query", ["offset=121466827448188277882880", "limit=0", "limit=100000", "offset=-1"])
def test_paging_out_of_bounds_is_a_400_naming_the_field(fleet, api, path, query):
    response = api.get(f"{path}?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["detail"][0]["loc"] == query.split("=")[0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "loc"),
    [("to=2026-06-16T12:30:45%2B20:59&resolution=raw", None), ("to=0528-06-16T12:30:45%2B00:00", "to")],
)
def test_far_offsets_and_years_are_answered_not_500(client, viewer, query, loc):
    gpu = GpuFactory()
    client.force_login(viewer)
    answer = client.get(f"/api/v1/gpus/{gpu.uuid}/readings?{query}")
    if loc is None:
        assert answer.status_code == 200
    else:
        assert answer.status_code == 400
        assert loc in [d["loc"] for d in answer.json()["detail"]]
