"""GET /api/v1/reports/usage and its page against the contract's definitions: spans clipped to the
period, busy hours counted once per GPU, available hours from the service hours, per user and per
account figures (idle GPU-hours, energy, interruptions), per model energy per GPU-hour and failures
per GPU-year, the busy share per day, the GPUs that ran flat out; CSV (formula injection), bad
input naming the field, roles, and a query count that does not grow with the fleet."""

import csv
import datetime as dt
import io
import json

import pytest

from portal.fleet.models import Gpu, GpuStatusChange
from portal.jobs.models import Job, JobSpan
from portal.maintenance.models import Ticket
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

UTC = dt.UTC
FROM = dt.datetime(2026, 3, 1, tzinfo=UTC)
TO = dt.datetime(2026, 3, 3, tzinfo=UTC)
PARAMS = {"from": "2026-03-01T00:00:00Z", "to": "2026-03-03T00:00:00Z"}
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def t(day, hour=0, minute=0):
    return dt.datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def gpu_at(registered, *, host=None, model=H100, history=()):
    gpu = GpuFactory(host=host or HostFactory(), model_name=model)
    Gpu.objects.filter(pk=gpu.pk).update(created_at=registered)
    gpu.refresh_from_db()
    GpuStatusChange.objects.create(gpu=gpu, changed_at=registered, from_status="", to_status="in_service",
                                   source="registration")  # fmt: skip
    previous = "in_service"
    for at, status in history:
        GpuStatusChange.objects.create(gpu=gpu, changed_at=at, from_status=previous, to_status=status, source="api")
        previous = status
    return gpu


def job(key, user=None, account=None):
    scheduler = key.split(":", 1)[0]
    return Job.objects.create(key=key, scheduler=scheduler, user=user, account=account, started_at=FROM, ended_at=FROM)


def span(job_row, gpu, start, end, util=None, energy_kwh=None, lost=None, ticket=None):
    if ticket is not None:  # the jobs' verdict (portal.jobs): interrupted by the ticket, these hours lost
        Job.objects.filter(pk=job_row.pk).update(interrupted=True, interrupted_by=ticket, gpu_hours_lost=lost)
    return JobSpan.objects.create(
        job=job_row, gpu=gpu, started_at=start, ended_at=end, readings=10,
        utilization_sum=(util or 0) * 10, utilization_count=10 if util is not None else 0,
        energy_mj=None if energy_kwh is None else energy_kwh * 3.6e9,
        interrupted_by=ticket, gpu_hours_lost=lost or 0.0,
    )  # fmt: skip


def ticket(gpu, rule, at, code=79, severity="critical"):
    return Ticket.objects.create(
        fingerprint=f"{rule}/gpu/{gpu.pk}/{at.timestamp()}", rule=rule, host=gpu.host, gpu=gpu, title=rule,
        severity=severity, first_seen=at, last_seen=at, evidence={"readings": [[at.timestamp(), code]]},
    )  # fmt: skip


def get(client, **params):
    return client.get("/api/v1/reports/usage", {**PARAMS, **params})


def by(rows, name, value):
    found = [row for row in rows if row[name] == value]
    assert len(found) == 1, rows
    return found[0]


@pytest.fixture
def lab():
    """Two H100s (one out for repair for 12 h) and an A100, with alice, bob and an unknown user."""
    host = HostFactory(hostname="dgx-01")
    g1 = gpu_at(t(1) - dt.timedelta(days=30), host=host)
    repair = [(t(2, 0), "out_for_repair"), (t(2, 12), "in_service")]
    g2 = gpu_at(t(1) - dt.timedelta(days=30), host=host, history=repair)
    g3 = gpu_at(t(1, 12), host=HostFactory(hostname="dgx-02"), model=A100)  # registered mid-period: 36 h
    alice, bob = job("slurm:1", "alice", "vision"), job("user:bob", "bob")
    shared, nobody = job("slurm:2", "alice", "vision"), job("slurm:3")
    # alice: 10 h on g1 from 22:00 the day before (2 h outside the period), 80 %, 10 kWh in all
    span(alice, g1, t(1) - dt.timedelta(hours=2), t(1, 8), util=80, energy_kwh=10)
    # alice again on g1 at the same time as bob (two jobs sharing a GPU: busy hours once)
    span(shared, g1, t(1, 6), t(1, 10), util=60, energy_kwh=4)
    # bob: holds g2 for 3 h at 2 % (idle), then a short idle-looking span (30 min: not idle)
    span(bob, g2, t(1, 12), t(1, 15), util=2, energy_kwh=0.6)
    span(bob, g2, t(1, 20), t(1, 20, 30), util=1)
    # an unknown user's job on the A100, interrupted by an XID 79: 2 h lost
    fault = ticket(g3, "xid_bus", t(2, 14))
    span(nobody, g3, t(2, 12), t(2, 14), util=90, energy_kwh=1.0, lost=2.0, ticket=fault)
    # outside the period: nothing
    span(job("slurm:9", "alice"), g1, t(3, 1), t(3, 5), util=99)
    return {"g1": g1, "g2": g2, "g3": g3}


def test_usage_figures(client_for, viewer, lab):
    response = get(client_for(viewer))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["period"] == {"from": "2026-03-01T00:00:00+00:00", "to": "2026-03-03T00:00:00+00:00"}
    fleet = body["fleet"]
    assert fleet["gpus"] == 3
    assert fleet["gpu_hours_available"] == pytest.approx(48 + 36 + 36)
    # g1: 00:00-10:00 (the shared hours once) = 10; g2: 3 + 0.5; g3: 2
    assert fleet["gpu_hours_busy"] == pytest.approx(15.5)
    assert fleet["busy_pct"] == pytest.approx(15.5 / 120 * 100)
    assert fleet["gpu_hours_lost"] == pytest.approx(2.0)
    # alice's first span: 8 of its 10 h inside, so 8 of its 10 kWh
    assert fleet["energy_kwh"] == pytest.approx(8 + 4 + 0.6 + 1.0)

    alice = by(body["users"], "user", "alice")
    assert alice == {
        "user": "alice", "jobs": 2, "gpu_hours": pytest.approx(12.0),
        "utilization_gpu_mean_pct": pytest.approx((80 * 8 + 60 * 4) / 12), "idle_gpu_hours": 0.0,
        "energy_kwh": pytest.approx(12.0), "interrupted_jobs": 0, "gpu_hours_lost": 0.0,
    }  # fmt: skip
    bob = by(body["users"], "user", "bob")
    assert (bob["jobs"], bob["gpu_hours"], bob["idle_gpu_hours"]) == (1, pytest.approx(3.5), pytest.approx(3.0))
    assert bob["energy_kwh"] == pytest.approx(0.6)
    unknown = by(body["users"], "user", None)
    assert (unknown["interrupted_jobs"], unknown["gpu_hours_lost"]) == (1, pytest.approx(2.0))
    assert [row["user"] for row in body["users"]] == ["alice", "bob", None]  # most GPU-hours first

    vision = by(body["accounts"], "account", "vision")
    assert (vision["jobs"], vision["gpu_hours"]) == (2, pytest.approx(12.0))
    assert by(body["accounts"], "account", None)["jobs"] == 2  # bob's and the unknown job

    h100, a100 = by(body["models"], "model", H100), by(body["models"], "model", A100)
    assert (h100["gpus"], h100["gpu_hours_busy"]) == (2, pytest.approx(13.5))
    # spans with a counter: 8 h (8 kWh) + 4 h (4 kWh) + 3 h (0.6 kWh); the 30 min without one adds nothing
    assert h100["energy_kwh_per_gpu_hour"] == pytest.approx(12.6 / 15)
    assert h100["failures_per_gpu_year"] == 0
    assert a100["energy_kwh_per_gpu_hour"] == pytest.approx(0.5)
    assert a100["failures_per_gpu_year"] == pytest.approx(1 / (36 / (24 * 365.25)))

    assert [d["day"] for d in body["days"]] == ["2026-03-01", "2026-03-02"]
    day1, day2 = body["days"]
    assert (day1["gpu_hours_available"], day1["gpu_hours_busy"]) == (pytest.approx(24 + 24 + 12), pytest.approx(13.5))
    assert (day2["gpu_hours_available"], day2["gpu_hours_busy"]) == (pytest.approx(24 + 12 + 24), pytest.approx(2.0))
    assert body["flat_out"] == []


def test_filters_host_and_model(client_for, viewer, lab):
    body = get(client_for(viewer), host="dgx-02").json()
    assert body["fleet"]["gpus"] == 1
    assert [row["user"] for row in body["users"]] == [None]
    body = get(client_for(viewer), model=H100).json()
    assert body["fleet"]["gpus"] == 2
    assert {row["user"] for row in body["users"]} == {"alice", "bob"}
    assert body["fleet"]["gpu_hours_lost"] == 0


def test_flat_out_without_rest(client_for, viewer):
    """Back-to-back jobs (no more than the span gap apart) flat out past the 72-hour rest policy, as
    the GPU page's panel finds them (portal.jobs); a pause longer than the gap breaks the run."""
    gpu = gpu_at(t(1) - dt.timedelta(days=30))
    start = dt.datetime(2026, 2, 20, tzinfo=UTC)
    longer = {"from": "2026-02-19T00:00:00Z", "to": PARAMS["to"]}

    def chen_runs(pause):
        JobSpan.objects.all().delete()
        first, second = job(f"slurm:10{pause}", "chen"), job(f"slurm:11{pause}", "chen")
        span(first, gpu, start, start + dt.timedelta(hours=50), util=97)
        resumed = start + dt.timedelta(hours=50, minutes=pause)
        span(second, gpu, resumed, resumed + dt.timedelta(hours=30), util=95)
        return client_for(viewer).get("/api/v1/reports/usage", longer).json()["flat_out"]

    [run] = chen_runs(4)
    assert (run["gpu"], run["hours"]) == (gpu.uuid, pytest.approx(80 + 4 / 60))
    assert (run["jobs"], run["users"]) == (["slurm:104", "slurm:114"], ["chen"])
    assert chen_runs(40) == []  # 50 h and 30 h, both under 72 h


def test_csv_by_accept_and_format_and_formula_injection(client_for, viewer):
    gpu = gpu_at(t(1) - dt.timedelta(days=30), model="=cmd|' /C calc'!A0")
    span(job("slurm:5", '=HYPERLINK("http://evil")', "+acct"), gpu, t(1, 1), t(1, 3), util=50, energy_kwh=1)
    client = client_for(viewer)
    for response in (get(client, format="csv"), client.get("/api/v1/reports/usage", PARAMS, HTTP_ACCEPT="text/csv")):
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/csv")
        assert 'filename="usage-20260301-20260303.csv"' in response["Content-Disposition"]
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        user = next(row for row in rows if row["table"] == "user")
        assert user["name"] == '\'=HYPERLINK("http://evil")'
        assert user["gpu_hours"] == "2.0" and user["jobs"] == "1"
        assert next(row for row in rows if row["table"] == "account")["name"] == "'+acct"
        assert next(row for row in rows if row["table"] == "model")["name"].startswith("'=cmd")
        fleet = next(row for row in rows if row["table"] == "fleet")
        assert (fleet["gpus"], fleet["gpu_hours_busy"], fleet["busy_pct"]) == ("1", "2.0", repr(round(2 / 48 * 100, 6)))
        assert [row["name"] for row in rows if row["table"] == "day"] == ["2026-03-01", "2026-03-02"]
    assert get(client, format="json")["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "params, field",
    [
        ({"from": ""}, "from"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-03-03T00:00:00"}, "to"),  # no zone
        ({"to": "2026-02-01T00:00:00Z"}, "to"),  # before from
        ({"to": "2028-06-01T00:00:00Z"}, "to"),  # longer than 731 days
        ({"host": "no host!"}, "host"),
        ({"format": "pdf"}, "format"),
    ],
)
def test_bad_input_names_the_field(client_for, viewer, params, field):
    response = get(client_for(viewer), **params)
    assert response.status_code == 400, response.content
    assert field in [problem["loc"].split(".")[-1] for problem in response.json()["detail"]], response.json()


def test_roles(client_for, actors):
    assert get(client_for(None)).status_code in (401, 403)
    assert get(client_for(actors["outsider"])).status_code == 403
    for role in ("viewer", "technician", "admin"):
        assert get(client_for(actors[role])).status_code == 200


def _fleet(hosts: int, gpus: int):
    for h in range(hosts):
        host = HostFactory(hostname=f"size-{hosts}-{h}")
        for i in range(gpus):
            gpu = gpu_at(t(1) - dt.timedelta(days=30), host=host, model=[H100, A100][h % 2],
                         history=[(t(1, 3), "out_for_repair"), (t(1, 5), "in_service")])  # fmt: skip
            row = job(f"slurm:{hosts}{h}{i}", f"user{i}", f"acct{h}")
            span(row, gpu, t(1, 1), t(1, 9), util=50, energy_kwh=2)
            span(row, gpu, t(1, 10), t(1, 12), util=3, lost=1.0, ticket=ticket(gpu, "xid_bus", t(1, 12)))


@pytest.mark.parametrize("hosts, gpus", [(1, 2), (6, 4)])
def test_query_count_constant_in_fleet_size(client_for, viewer, django_assert_num_queries, hosts, gpus):
    _fleet(hosts, gpus)
    client = client_for(viewer)
    # session, user and its permissions (2), then: listed GPUs, status history, retirements, spans, their jobs,
    # interruptions, rule settings (rest policy), failure tickets, repairs (failures)
    with django_assert_num_queries(13):
        body = get(client).json()
    assert body["fleet"]["gpus"] == hosts * gpus
    assert body["fleet"]["gpu_hours_lost"] == pytest.approx(hosts * gpus)


def test_page_charts_tables_and_nav(client_for, viewer, lab):
    client = client_for(viewer)
    page = client.get("/reports/usage", {"from": "2026-03-01", "to": "2026-03-03"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/reports/usage"' in html  # the navigation
    assert "core/plotly-cartesian.min.js" in html and "reports/usage.js" in html
    assert "/api/v1/reports/usage?from=2026-03-01T00%3A00%3A00%2B00%3A00" in html
    charts = json.loads(html.split('<script id="usage-data" type="application/json">')[1].split("</script>")[0])
    assert charts["days"]["x"] == ["2026-03-01", "2026-03-02"]
    assert charts["users"]["names"] == ["alice", "bob", "(unknown)"]
    assert charts["users"]["idle"][1] == 3.0
    assert set(charts["models"]["names"]) == {H100, A100}
    assert "dgx-01" in html


def test_page_bad_input_and_user_text_escaped(client_for, viewer):
    client = client_for(viewer)
    page = client.get("/reports/usage", {"from": "2026-03-05", "to": "2026-03-01"})
    assert page.status_code == 400
    assert 'aria-invalid="true"' in page.content.decode()
    gpu = gpu_at(t(1) - dt.timedelta(days=30))
    span(job("slurm:77", "<script>alert(1)</script>"), gpu, t(1, 1), t(1, 2), util=50)
    html = client.get("/reports/usage", {"from": "2026-03-01", "to": "2026-03-03"}).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_page_in_chinese(client_for, viewer, lab):
    client = client_for(viewer)
    client.cookies["django_language"] = "zh-hans"
    html = client.get("/reports/usage", {"from": "2026-03-01", "to": "2026-03-03"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    text = html.content.decode()
    assert "使用报告" in text and "每日忙碌占比" in text and "型号" in text and "结束" in text


def test_page_links_the_job_pages(client_for, viewer, lab):
    html = client_for(viewer).get("/reports/usage", {"from": "2026-03-01", "to": "2026-03-03"}).content.decode()
    assert 'href="/jobs/?user=alice"' in html
    assert 'href="/jobs/?user=bob&amp;idle=true"' in html
