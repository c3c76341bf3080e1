"""POST/GET /api/v1/maintenance-windows, complete and cancel: every 400 and 409 the contract names,
roles, the beat's start (silence, one run per host, claimed once), completion by the last run."""

import datetime as dt
import importlib
import threading

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.utils import timezone

from portal.checklists import services as checklists
from portal.checklists.models import ChecklistRun, ChecklistTemplate
from portal.maintenance.models import Silence
from portal.windows import services
from portal.windows.models import MaintenanceWindow, WindowHost
from tests.windows.conftest import body, later

pytestmark = pytest.mark.django_db
SAME = later(days=7).isoformat()


def test_a_technician_plans_a_window_and_everyone_reads_it(api, hosts, technician, viewer):
    answer = api(technician)("post", "", body(hosts=["dgx-02", "dgx-03", "dgx-02"]))
    assert answer.status_code == 201, answer.content
    window = answer.json()
    assert window["state"] == "scheduled" and window["hosts"] == ["dgx-02", "dgx-03"]
    assert window["checklist"] == "cleaning" and window["runs"] == [] and window["created_by"] == "bob"
    assert window["reservation"] is None and window["affected_jobs"] == []  # Slurm is off
    for key in ("id", "title", "starts_at", "ends_at", "notes"):
        assert key in window
    read = api(viewer)("get", f"/{window['id']}")
    assert read.status_code == 200 and read.json() == window
    listed = api(viewer)("get", "", {"host": "dgx-03"}).json()
    assert listed["count"] == 1 and listed["items"][0]["id"] == window["id"]
    assert api(viewer)("get", "", {"host": "dgx-01"}).json()["count"] == 0
    assert api(viewer)("get", "", {"state": "completed"}).json()["count"] == 0


def test_the_list_is_soonest_first(api, hosts, admin):
    later_one = api(admin)("post", "", body(hosts=["dgx-01"], starts_at=later(days=3).isoformat(),
                                            ends_at=later(days=3, hours=1).isoformat())).json()  # fmt: skip
    sooner = api(admin)("post", "", body(hosts=["dgx-02"], starts_at=later(days=1).isoformat(),
                                         ends_at=later(days=1, hours=1).isoformat())).json()  # fmt: skip
    assert [w["id"] for w in api(admin)("get", "").json()["items"]] == [sooner["id"], later_one["id"]]


@pytest.mark.parametrize(
    ("overrides", "loc"),
    [
        ({"ends_at": later(days=7).isoformat(), "starts_at": later(days=7, hours=1).isoformat()}, "ends_at"),
        ({"starts_at": SAME, "ends_at": SAME}, "ends_at"),
        ({"starts_at": later(minutes=-10).isoformat(), "ends_at": later(hours=1).isoformat()}, "starts_at"),
        ({"starts_at": later(days=1).isoformat(), "ends_at": later(days=8, hours=1).isoformat()}, "ends_at"),
        ({"hosts": ["dgx-02", "nowhere"]}, "hosts.1"),
        ({"hosts": []}, "hosts"),
        ({"checklist": "no-such-template"}, "checklist"),
        ({"title": "   "}, "title"),
        ({"starts_at": "2026-12-14T08:00:00"}, "starts_at"),  # no zone
        ({"ends_at": "tomorrow"}, "ends_at"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(api, hosts, technician, overrides, loc):
    answer = api(technician)("post", "", body(**overrides))
    assert answer.status_code == 400, answer.content
    assert loc in [d["loc"] for d in answer.json()["detail"]], answer.json()
    assert not MaintenanceWindow.objects.exists()


def test_a_start_a_few_minutes_ago_is_now_typed_slowly(api, hosts, technician):
    slow = body(starts_at=later(minutes=-4).isoformat(), ends_at=later(hours=1).isoformat())
    answer = api(technician)("post", "", slow)
    assert answer.status_code == 201


def test_an_overlapping_window_on_a_host_is_a_409_naming_hosts(api, hosts, technician):
    first = api(technician)("post", "", body(hosts=["dgx-01", "dgx-02"])).json()
    start = dt.datetime.fromisoformat(first["starts_at"])
    clash = body(hosts=["dgx-03", "dgx-02"], starts_at=(start + dt.timedelta(hours=3)).isoformat(),
                 ends_at=(start + dt.timedelta(hours=4)).isoformat())  # fmt: skip
    answer = api(technician)("post", "", clash)
    assert answer.status_code == 409
    detail = answer.json()["detail"]
    assert [d["loc"] for d in detail] == ["hosts"]
    assert "dgx-02" in detail[0]["msg"] and f"#{first['id']}" in detail[0]["msg"]
    assert MaintenanceWindow.objects.count() == 1
    # Back to back is no overlap (periods are half-open); a cancelled window holds nothing.
    touching = body(hosts=["dgx-02"], starts_at=first["ends_at"], ends_at=(start + dt.timedelta(hours=8)).isoformat())
    assert api(technician)("post", "", touching).status_code == 201
    assert api(technician)("post", f"/{first['id']}/cancel").status_code == 200
    assert api(technician)("post", "", clash).status_code == 201


def test_roles(api, hosts, actors, client_for):
    assert api(actors["viewer"])("post", "", body()).status_code == 403
    assert api(actors["outsider"])("get", "").status_code == 403
    assert client_for(None).get("/api/v1/maintenance-windows").status_code == 401
    made = api(actors["admin"])("post", "", body()).json()
    assert api(actors["viewer"])("post", f"/{made['id']}/complete").status_code == 403
    assert api(actors["viewer"])("post", f"/{made['id']}/cancel").status_code == 403
    assert api(actors["viewer"])("get", "/999999").status_code == 404
    assert MaintenanceWindow.objects.get().state == "scheduled"


def test_completed_or_cancelled_is_a_409_for_both(api, hosts, technician):
    made = api(technician)("post", "", body()).json()
    assert api(technician)("post", f"/{made['id']}/complete").json()["state"] == "completed"
    for action in ("complete", "cancel"):
        answer = api(technician)("post", f"/{made['id']}/{action}")
        assert answer.status_code == 409 and answer.json()["detail"][0]["loc"] == "state"
    other = api(technician)("post", "", body(hosts=["dgx-01"])).json()
    assert api(technician)("post", f"/{other['id']}/cancel").json()["state"] == "cancelled"
    assert api(technician)("post", f"/{other['id']}/complete").status_code == 409


def _due_window(technician, hosts=("dgx-01", "dgx-02"), checklist="cleaning") -> MaintenanceWindow:
    return services.window_create(
        title="Fans", starts_at=later(minutes=-1), ends_at=later(hours=2), hostnames=list(hosts), checklist=checklist,
        user=technician,
    )  # fmt: skip


def test_the_beat_starts_a_due_window_once(hosts, technician):
    window = _due_window(technician)
    future = services.window_create(title="Later", starts_at=later(days=2), ends_at=later(days=2, hours=1),
                                    hostnames=["dgx-03"], user=technician)  # fmt: skip
    services.windows_beat()
    services.windows_beat()
    window.refresh_from_db()
    assert window.state == "active" and window.started_at is not None
    runs = ChecklistRun.objects.filter(template__key="cleaning").order_by("host__hostname")
    assert [r.host.hostname for r in runs] == ["dgx-01", "dgx-02"] and all(r.state == "in_progress" for r in runs)
    assert Silence.objects.filter(host__hostname__in=["dgx-01", "dgx-02"], ends_at__gte=window.ends_at).count() == 2
    assert "maintenance window" in Silence.objects.first().comment
    future.refresh_from_db()
    assert future.state == "scheduled" and not Silence.objects.filter(host__hostname="dgx-03").exists()
    assert services.window_start(window_id=window.pk) is None  # claimed already


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_beats_at_once_start_a_window_once(hosts, technician):
    if connection.vendor != "postgresql":
        pytest.skip("two writers at once need PostgreSQL")
    if not ChecklistTemplate.objects.filter(key="cleaning").exists():
        # a transactional test that ran before this one flushed the tables: ship the templates again
        importlib.import_module("portal.checklists.migrations.0002_shipped_templates").ship(django_apps, None)
    window = _due_window(technician)
    barrier = threading.Barrier(2)
    results = []

    def beat():
        from django.db import connection as own

        try:
            barrier.wait()
            results.append(len(services.windows_start_due()))
        finally:
            own.close()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [0, 1]
    assert ChecklistRun.objects.count() == 2 and Silence.objects.count() == 2
    assert MaintenanceWindow.objects.get(pk=window.pk).state == "active"


def test_the_last_run_signed_off_completes_the_window(hosts, technician, django_capture_on_commit_callbacks):
    window = _due_window(technician, checklist="connection_check")
    services.windows_beat()
    rows = WindowHost.objects.filter(window=window).select_related("run").order_by("host__hostname")
    runs = [row.run for row in rows]
    assert len(runs) == 2

    def sign(run):
        required = [item for item in run.items if item["required"]]
        answers = [{"item": i["key"], "value": _answer(i)} for i in required]
        with django_capture_on_commit_callbacks(execute=True):
            checklists.run_answer(run=run, answers=answers, user=technician)
            checklists.run_complete(run=run, signature="Bob Builder", user=technician)

    sign(runs[0])
    window.refresh_from_db()
    assert window.state == "active"
    sign(runs[1])
    window.refresh_from_db()
    assert window.state == "completed" and window.ended_by == technician
    assert not Silence.objects.filter(ends_at__gt=timezone.now()).exists()


def _answer(item):
    return {"check": True, "pass_fail": "pass", "number": item.get("min") or 1, "text": "ok",
            "choice": (item.get("options") or ["x"])[0]}[item["kind"]]  # fmt: skip


def test_cancel_of_an_active_window_abandons_its_runs_and_ends_the_silences(api, hosts, technician):
    window = _due_window(technician)
    services.windows_beat()
    answer = api(technician)("post", f"/{window.pk}/cancel")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    assert len(answer.json()["runs"]) == 2
    assert set(ChecklistRun.objects.values_list("state", flat=True)) == {"abandoned"}
    assert not Silence.objects.filter(ends_at__gt=timezone.now()).exists()


def test_a_window_running_over_keeps_its_silence(hosts, technician):
    window = _due_window(technician)
    services.windows_beat()
    MaintenanceWindow.objects.filter(pk=window.pk).update(ends_at=later(minutes=-30))
    Silence.objects.update(ends_at=later(minutes=-1))
    services.windows_beat()
    assert Silence.objects.filter(ends_at__gt=timezone.now()).count() == 2


def test_the_list_and_its_page_run_a_constant_number_of_queries(api, client_for, hosts, technician, viewer):
    from django.test.utils import CaptureQueriesContext

    made = []

    def make(n):
        for _k in range(n):
            made.append(1)
            start = later(days=10 + len(made))
            services.window_create(title=f"w{len(made)}", starts_at=start, ends_at=start + dt.timedelta(hours=1),
                                   hostnames=["dgx-01", "dgx-02"], user=technician)  # fmt: skip

    make(1)
    client = client_for(viewer)
    counts = []
    for _round in range(2):
        with CaptureQueriesContext(connection) as listed:
            assert api(viewer)("get", "").status_code == 200
        with CaptureQueriesContext(connection) as page:
            assert client.get("/maintenance-windows/").status_code == 200
        counts.append((len(listed), len(page)))
        make(6)
    assert counts[0] == counts[1], counts
