"""Planned maintenance windows against the real Slurm the scheduler tests start (cli mode): the
reservation made (seen by `scontrol show reservation`) and deleted at completion, a job that would
run into the window kept off its node, the drain at the start and the resume by the Scheduler
section's rules at the end; Slurm not answering never fails a request. The slurmrestd v0.0.43
reservation calls against a recorded HTTP stub (the local 22.05 slurmrestd cannot make them)."""

import datetime as dt
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.utils import timezone

from portal.maintenance.models import Ticket
from portal.scheduler.adapters import SchedulerUnavailable, SlurmRest
from portal.scheduler.models import SchedulerAction
from portal.windows import services
from portal.windows.models import MaintenanceWindow
from portal.windows.tasks import windows_beat_task
from tests.factories import GpuFactory
from tests.scheduler.helpers import enrol, node, slurm_never_answers

pytestmark = pytest.mark.django_db


@pytest.fixture
def slurm(settings, cluster):
    settings.SLURM_ENABLED = True
    settings.SLURM_MODE = "cli"
    settings.SLURM_BIN_DIR = ""
    settings.SLURM_DRAIN_SEVERITY = "critical"
    settings.BURN_IN_LEVEL = 0
    yield cluster
    listed = cluster.run("scontrol", "-o", "show", "reservation")
    for name in re.findall(r"ReservationName=(\S+)", listed):
        cluster.run("scontrol", "delete", f"ReservationName={name}")


def _post(client, path, body=None):
    return client.post(f"/api/v1/maintenance-windows{path}", json.dumps(body or {}), content_type="application/json")


def _window(client, cluster, *, start: dt.datetime, hours: float = 1, title="Fans and filters") -> dict:
    body = {"title": title, "starts_at": start.isoformat(), "ends_at": (start + dt.timedelta(hours=hours)).isoformat(),
            "hosts": [cluster.node]}  # fmt: skip
    answer = _post(client, "", body)
    assert answer.status_code == 201, answer.content
    return answer.json()


def _reservation(cluster, name: str) -> str:
    import subprocess

    done = subprocess.run(["scontrol", "-o", "show", "reservation", name], capture_output=True, text=True,
                          env=cluster.env(), check=False)  # fmt: skip
    return done.stdout + done.stderr


def _state(cluster, job: int) -> str:
    return cluster.run("squeue", "-h", "-j", str(job), "-o", "%T").strip()


def test_the_reservation_keeps_jobs_that_would_run_into_the_window_off_the_node(slurm, technician, client_for):
    enrol(slurm.node)
    client = client_for(technician)
    unlimited = slurm.sbatch("--gres=gpu:1", "-J", "no-limit", "--wrap", "sleep 600")
    short = slurm.sbatch("--gres=gpu:1", "-t", "3", "-J", "short", "--wrap", "sleep 600")
    slurm.wait_running(unlimited)
    slurm.wait_running(short)

    window = _window(client, slurm, start=timezone.now() + dt.timedelta(minutes=10))

    name = f"gpu-fleet-window-{window['id']}"
    assert window["reservation"] == name and window["reservation_state"] == "made", window
    shown = _reservation(slurm, name)
    assert f"ReservationName={name}" in shown and f"Nodes={slurm.node}" in shown, shown
    assert "MAINT" in shown and "IGNORE_JOBS" in shown
    # Running jobs whose end falls after the start: the one without a time limit, not the 3-minute one.
    assert [(j["job"], j["user"], j["expected_end"]) for j in window["affected_jobs"]] == [
        (f"slurm:{unlimited}", "root", None)
    ]
    slurm.scancel_all()
    into_window = slurm.sbatch("-t", "30", "-J", "into-window", "--wrap", "sleep 600")
    before = slurm.sbatch("-t", "2", "-J", "before-window", "--wrap", "sleep 1")
    deadline = time.monotonic() + 20
    while _state(slurm, before) in ("PENDING", "CONFIGURING") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _state(slurm, before) in ("RUNNING", "COMPLETING", "")  # a job that ends before the window runs
    assert _state(slurm, into_window) == "PENDING"
    reason = slurm.run("squeue", "-h", "-j", str(into_window), "-o", "%r")
    assert "Reserv" in reason or "ReqNodeNotAvail" in reason, reason

    slurm.run("scancel", str(into_window), str(before))  # pending jobs are no node's: scancel -w leaves them
    done = _post(client, f"/{window['id']}/complete").json()
    assert done["state"] == "completed" and done["reservation_state"] == "deleted" and done["reservation"] is None
    assert "not found" in _reservation(slurm, name)


def test_the_start_drains_the_node_and_completion_resumes_it(
    slurm, technician, admin, client_for, django_capture_on_commit_callbacks
):
    host, _ = enrol(slurm.node)
    client = client_for(technician)
    window = _window(client, slurm, start=timezone.now() - dt.timedelta(minutes=1), title='Fans; "dust", rack 4\nB')

    with django_capture_on_commit_callbacks(execute=True):
        windows_beat_task()

    state = node(slurm)
    assert (
        state.state.split("+")[0] == "drained"
        and state.reason == f"gpu-fleet window #{window['id']}: Fans; 'dust', rack 4 B"
    )
    drain = SchedulerAction.objects.get(host=host, kind="drain", source="window")
    assert drain.state == "done"
    # Nobody resumes it by hand while the window is under way, unless an admin forces it.
    refused = client.post(f"/api/v1/hosts/{host.hostname}/scheduler/resume", "{}", content_type="application/json")
    assert refused.status_code == 409 and [d["loc"] for d in refused.json()["detail"]] == ["window"]

    with django_capture_on_commit_callbacks(execute=True):
        answer = _post(client, f"/{window['id']}/complete")
    assert answer.status_code == 200 and answer.json()["state"] == "completed"
    assert node(slurm).state.split("+")[0] == "idle"
    assert SchedulerAction.objects.get(host=host, kind="resume", source="window").state == "done"
    assert "not found" in _reservation(slurm, window["reservation"] or f"gpu-fleet-window-{window['id']}")


def test_a_persons_drain_and_an_open_ticket_stay_at_completion(
    slurm, technician, client_for, django_capture_on_commit_callbacks
):
    host, _ = enrol(slurm.node)
    client = client_for(technician)
    first = _window(client, slurm, start=timezone.now() - dt.timedelta(minutes=1), hours=0.5)
    with django_capture_on_commit_callbacks(execute=True):
        windows_beat_task()
    slurm.run("scontrol", "update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=rack power work")
    with django_capture_on_commit_callbacks(execute=True):
        _post(client, f"/{first['id']}/complete")
    assert node(slurm).state.split("+")[0] == "drained" and node(slurm).reason == "rack power work"
    resume = SchedulerAction.objects.get(host=host, kind="resume", source="window")
    assert resume.state == "skipped" and "a person drained it (rack power work)" in resume.outcome

    slurm.reset_node()
    ticket = Ticket.objects.create(host=host, rule="xid_bus", severity="critical", title="XID 79", state="open",
                                   fingerprint="t", first_seen=timezone.now(), last_seen=timezone.now())  # fmt: skip
    second = _window(client, slurm, start=timezone.now() + dt.timedelta(minutes=40), hours=0.5)
    MaintenanceWindow.objects.filter(pk=second["id"]).update(starts_at=timezone.now() - dt.timedelta(minutes=1))
    with django_capture_on_commit_callbacks(execute=True):
        windows_beat_task()
    with django_capture_on_commit_callbacks(execute=True):
        _post(client, f"/{second['id']}/complete")
    assert node(slurm).state.split("+")[0] == "drained"
    assert f"ticket #{ticket.pk} is open" in SchedulerAction.objects.filter(kind="resume").order_by("-id")[0].outcome


def test_a_gpu_out_for_repair_without_its_diagnostic_keeps_the_node_drained(
    slurm, technician, client_for, django_capture_on_commit_callbacks
):
    host, _ = enrol(slurm.node)
    GpuFactory(host=host, index=0, uuid="GPU-window-0")
    GpuFactory(host=host, index=1, uuid="GPU-window-1", status="out_for_repair")
    client = client_for(technician)
    window = _window(client, slurm, start=timezone.now() - dt.timedelta(minutes=1), hours=0.5)
    with django_capture_on_commit_callbacks(execute=True):
        windows_beat_task()
    with django_capture_on_commit_callbacks(execute=True):
        _post(client, f"/{window['id']}/complete")
    assert node(slurm).state.split("+")[0] == "drained"
    resume = SchedulerAction.objects.get(host=host, kind="resume", source="window")
    assert resume.state == "skipped" and "GPU 1 (GPU-window-1) out for repair" in resume.outcome


def test_slurm_not_answering_never_fails_the_request_and_the_beat_makes_it_later(
    slurm, settings, tmp_path, technician, client_for
):
    enrol(slurm.node)
    usual = slurm_never_answers(settings, tmp_path)
    window = _window(client_for(technician), slurm, start=timezone.now() + dt.timedelta(minutes=30))
    assert window["reservation"] is None and window["reservation_state"] == "pending"
    assert "did not answer" in window["reservation_error"]
    page = client_for(technician).get(f"/maintenance-windows/{window['id']}/")
    assert b"reservation-error" in page.content

    settings.SLURM_BIN_DIR, settings.SLURM_TIMEOUT = "", usual  # Slurm answers again
    services.windows_beat()
    again = MaintenanceWindow.objects.get(pk=window["id"])
    assert again.reservation_state == "made" and again.reservation_error == ""
    assert f"ReservationName={again.reservation}" in _reservation(slurm, again.reservation)


class _Slurmrestd(BaseHTTPRequestHandler):
    """A slurmrestd of Slurm 25.05 (v0.0.43) that records what it is asked."""

    requests: list = []
    reservations: dict = {}

    def _answer(self, body: dict, status: int = 200):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.requests.append(("GET", self.path, None))
        if self.path == "/openapi/v3":
            return self._answer({"paths": {"/slurm/v0.0.43/reservation/{reservation_name}": {}}})
        name = self.path.rsplit("/", 1)[-1]
        if name in self.reservations:
            return self._answer({"reservations": [self.reservations[name]], "errors": []})
        return self._answer({"reservations": [], "errors": [{"error": "Unable to query reservation"}]}, status=404)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(("POST", self.path, body))
        self.reservations[body["name"]] = {"name": body["name"], "node_list": ",".join(body["node_list"]),
                                           "flags": body["flags"]}  # fmt: skip
        return self._answer({"errors": []})

    def do_DELETE(self):  # noqa: N802
        self.requests.append(("DELETE", self.path, None))
        self.reservations.pop(self.path.rsplit("/", 1)[-1], None)
        return self._answer({"errors": []})

    def log_message(self, *args):
        pass


@pytest.fixture
def slurmrestd_25_05():
    server = HTTPServer(("127.0.0.1", 0), _Slurmrestd)
    _Slurmrestd.requests, _Slurmrestd.reservations = [], {}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", _Slurmrestd.requests
    server.shutdown()


def test_slurmrestd_makes_and_deletes_the_reservation(slurmrestd_25_05):
    url, requests = slurmrestd_25_05
    adapter = SlurmRest(url=url, user="gpufleet", token="jwt")
    start = dt.datetime(2026, 12, 14, 8, 0, tzinfo=dt.UTC)
    adapter.reservation_create("gpu-fleet-window-7", nodes=["dgx-02", "dgx-03"], start=start,
                               end=start + dt.timedelta(hours=4))  # fmt: skip
    posts = [(path, body) for method, path, body in requests if method == "POST"]
    epoch = int(start.timestamp())
    assert posts == [("/slurm/v0.0.43/reservation", {
        "name": "gpu-fleet-window-7", "node_list": ["dgx-02", "dgx-03"], "users": ["root"],
        "flags": ["MAINT", "IGNORE_JOBS"], "start_time": {"set": True, "infinite": False, "number": epoch},
        "end_time": {"set": True, "infinite": False, "number": epoch + 4 * 3600},
    })]  # fmt: skip
    made = adapter.reservation("gpu-fleet-window-7")
    assert made is not None and made.nodes == ["dgx-02", "dgx-03"] and made.flags == ["MAINT", "IGNORE_JOBS"]
    adapter.reservation_create("gpu-fleet-window-7", nodes=["dgx-02"], start=start, end=start)  # made: not again
    assert len([r for r in requests if r[0] == "POST"]) == 1
    adapter.reservation_delete("gpu-fleet-window-7")
    assert ("DELETE", "/slurm/v0.0.43/reservation/gpu-fleet-window-7", None) in requests
    assert adapter.reservation("gpu-fleet-window-7") is None
    adapter.reservation_delete("gpu-fleet-window-7")  # gone already: done


def test_an_older_slurmrestd_says_it_cannot_make_reservations(slurm, settings):
    older = SlurmRest(url=slurm.rest_url, user=slurm.rest_user, token=slurm.rest_token)
    with pytest.raises(SchedulerUnavailable, match="cannot create reservations"):
        older.reservation_create("gpu-fleet-window-1", nodes=[slurm.node], start=timezone.now(),
                                 end=timezone.now() + dt.timedelta(hours=1))  # fmt: skip
    assert older.reservation("gpu-fleet-window-1") is None


def test_in_rest_mode_the_window_reserves_through_slurmrestd(slurmrestd_25_05, settings, technician, client_for):
    url, requests = slurmrestd_25_05
    settings.SLURM_ENABLED, settings.SLURM_MODE = True, "rest"
    settings.SLURM_REST_URL, settings.SLURM_REST_USER, settings.SLURM_REST_TOKEN = url, "gpufleet", "jwt"
    enrol("gpu07")
    client = client_for(technician)
    start = timezone.now() + dt.timedelta(days=1)
    body = {"title": "Fans", "starts_at": start.isoformat(), "ends_at": (start + dt.timedelta(hours=2)).isoformat(),
            "hosts": ["gpu07"]}  # fmt: skip
    window = _post(client, "", body).json()
    name = f"gpu-fleet-window-{window['id']}"
    assert window["reservation"] == name and window["reservation_state"] == "made"
    assert [body["node_list"] for method, _path, body in requests if method == "POST"] == [["gpu07"]]
    done = _post(client, f"/{window['id']}/cancel").json()
    assert done["state"] == "cancelled" and done["reservation_state"] == "deleted"
    assert ("DELETE", f"/slurm/v0.0.43/reservation/{name}", None) in requests
