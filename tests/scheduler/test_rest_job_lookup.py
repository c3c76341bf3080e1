"""The rest adapter's `job_info` against hand-built slurmrestd answers, and beat's lookup through it:
an answer that says the job is unknown, and any other error answer about it, is "not known" (beat
counts a try and gives up after LOOKUP_TRIES, so no job holds up the queue); Slurm not answering
(no connection, a timeout, 502/503/504, slurmctld or slurmdbd unreachable behind slurmrestd) is
SchedulerSilent (the pass stops, nothing counted); the token refused is the setup's fault, raised
too, never a try against every job. What a 22.05 slurmrestd answers was read from the test
cluster's (test_job_lookup.py asks it for real)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from portal.jobs import services
from portal.jobs.models import Job
from portal.scheduler.adapters import JobInfo, SchedulerRefused, SchedulerSilent, SchedulerUnavailable, SlurmRest

API = "v0.0.41"
CTLD, DBD = f"/slurm/{API}/job/", f"/slurmdb/{API}/job/"
NO_URL = (404, "Unable find requested URL. Please view /openapi/v3 for API reference.")  # no slurmdbd plugin


def errors(*texts: str, number: int = 1) -> dict:
    return {"errors": [{"description": "", "error_number": number, "error": t, "source": "x"} for t in texts],
            "jobs": []}  # fmt: skip


def job(job_id: int, user: str = "dora", name: str = "eval", account: str = "vision") -> dict:
    return {"errors": [], "jobs": [{"job_id": job_id, "user_name": user, "name": name, "account": account}]}


INVALID = errors("Invalid job id specified", number=2017)  # 22.05's 500 for a job slurmctld forgot
CONTROLLER_DOWN = errors("Unable to contact slurm controller (connect failure)", number=1800)
DATABASE_DOWN = errors("Unable to connect to database", number=7000)


class _Answers(BaseHTTPRequestHandler):
    """slurmrestd as a test writes it: `answers` maps a path to (status, body) or a callable
    giving one; a path not given is 404 without JSON, as slurmrestd says of a path it lacks."""

    answers: dict = {}
    asked: list = []

    def do_GET(self):  # noqa: N802
        self.asked.append(self.path)
        if self.path == "/openapi/v3":
            status, body = 200, {"paths": {f"/slurm/{API}/job/{{job_id}}": {}, f"/slurmdb/{API}/job/{{job_id}}": {}}}
        else:
            answer = self.answers.get(self.path, NO_URL)
            status, body = answer() if callable(answer) else answer
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the adapter gave up waiting
            self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def slurmrestd():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.daemon_threads = True
    _Answers.answers, _Answers.asked = {}, []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", _Answers
    server.shutdown()
    server.server_close()


def adapter(url: str) -> SlurmRest:
    return SlurmRest(url=url, user="gpufleet", token="jwt-abc", timeout=0.5)


def test_a_job_slurmctld_holds_or_slurmdbd_remembers_is_named(slurmrestd):
    url, stub = slurmrestd
    stub.answers = {
        f"{CTLD}7": (200, job(7)),
        f"{CTLD}8": (500, INVALID),
        f"{DBD}8": (200, job(8, "eve", "fit", "nlp")),
    }
    assert adapter(url).job_info(7) == JobInfo(user="dora", name="eval", account="vision")
    assert adapter(url).job_info(8) == JobInfo(user="eve", name="fit", account="nlp")
    assert [p for p in stub.asked if p != "/openapi/v3"] == [f"{CTLD}7", f"{CTLD}8", f"{DBD}8"]


@pytest.mark.parametrize(
    "ctld, dbd",
    [
        ((500, INVALID), NO_URL),  # 22.05 without slurmdbd, as the test cluster answers
        ((404, errors("Invalid job id specified", number=2017)), (404, errors("Job not found"))),  # newer
        ((200, {"errors": [], "jobs": []}), (200, {"errors": [], "jobs": []})),  # nobody has it
        ((500, errors("Unspecified error")), (500, errors("Unspecified error"))),  # other 500s, errors listed
        ((500, "Internal Server Error"), (500, {"no": "errors list"})),  # a 500 without slurmrestd's JSON
        ((400, errors("Rejecting request. Invalid job id")), (422, errors("Unable to parse query"))),  # other 4xx
        ((200, "<html>not JSON</html>"), (200, ["not", "an", "object"])),  # an answer, but no JSON object
        ((500, INVALID), (500, errors("Accounting storage is disabled"))),  # accounting off
    ],
)
def test_an_error_answer_about_the_job_is_not_known_not_slurm_down(slurmrestd, ctld, dbd):
    url, stub = slurmrestd
    stub.answers = {f"{CTLD}9": ctld, f"{DBD}9": dbd}
    assert adapter(url).job_info(9) is None
    assert stub.asked[-2:] == [f"{CTLD}9", f"{DBD}9"]  # both sources asked, as scontrol then sacct


@pytest.mark.parametrize(
    "ctld, dbd",
    [
        ((502, errors("Unable to contact slurm controller (connect failure)")), None),  # newer slurmrestd
        ((503, "Service Unavailable"), None),  # a proxy before slurmrestd
        ((504, errors("Socket timed out on send/recv operation")), None),
        ((500, CONTROLLER_DOWN), None),  # 22.05 says the same with a 500
        ((500, INVALID), (500, DATABASE_DOWN)),  # slurmctld forgot it, slurmdbd does not answer
        ((500, INVALID), (502, "Bad Gateway")),
        ((200, CONTROLLER_DOWN), None),  # silence in a 200's errors
    ],
)
def test_slurm_not_answering_is_silent(slurmrestd, ctld, dbd):
    url, stub = slurmrestd
    stub.answers = {f"{CTLD}9": ctld, **({f"{DBD}9": dbd} if dbd else {})}
    with pytest.raises(SchedulerSilent, match="slurmrestd"):
        adapter(url).job_info(9)


def test_no_connection_or_no_answer_in_time_is_silent(slurmrestd):
    url, stub = slurmrestd
    with pytest.raises(SchedulerSilent, match="could not be reached"):
        adapter("http://127.0.0.1:9").job_info(9)
    stub.answers = {f"{CTLD}9": (500, INVALID), f"{DBD}9": lambda: time.sleep(1.5) or (200, job(9))}
    with pytest.raises(SchedulerSilent, match="could not be reached"):
        adapter(url).job_info(9)


@pytest.mark.parametrize("status", [401, 403, 511])
def test_a_refused_token_is_the_setups_fault_not_the_jobs(slurmrestd, status):
    url, stub = slurmrestd
    stub.answers = {f"{CTLD}9": (status, errors("Authentication failure"))}
    with pytest.raises(SchedulerRefused, match=f"answered {status}") as raised:
        adapter(url).job_info(9)
    assert raised.value.status == status and not isinstance(raised.value, SchedulerSilent)
    assert isinstance(raised.value, SchedulerUnavailable)  # beat's pass stops on it, counting nothing


def _job_row(job_id: int) -> Job:
    now = timezone.now()
    return Job.objects.create(key=f"slurm:{job_id}", scheduler=Job.Scheduler.SLURM, started_at=now, ended_at=now)


@pytest.mark.django_db
def test_beat_counts_error_answers_as_tries_and_stops_when_slurm_is_silent(slurmrestd, settings):
    url, stub = slurmrestd
    settings.SLURM_ENABLED, settings.SLURM_MODE, settings.SLURM_TIMEOUT = True, "rest", 0.5
    settings.SLURM_REST_URL, settings.SLURM_REST_USER, settings.SLURM_REST_TOKEN = url, "gpufleet", "jwt-abc"
    odd, real = _job_row(41), _job_row(42)  # the job slurmrestd errs on is queued first
    stub.answers = {f"{CTLD}41": (500, errors("Unspecified error")), f"{DBD}41": (400, errors("Bad request")),
                    f"{CTLD}42": (200, job(42))}  # fmt: skip
    assert services.jobs_slurm_lookup() == 1
    odd.refresh_from_db()
    real.refresh_from_db()
    assert (odd.lookup, odd.lookup_tries) == ("pending", 1)
    assert (real.user, real.name, real.account, real.lookup) == ("dora", "eval", "vision", "done")
    stub.answers[f"{CTLD}41"] = (502, CONTROLLER_DOWN)  # Slurm silent: nothing counted
    assert services.jobs_slurm_lookup() == 0
    odd.refresh_from_db()
    assert (odd.lookup, odd.lookup_tries) == ("pending", 1)
    stub.answers[f"{CTLD}41"] = (401, errors("Authentication failure"))  # the token: nothing counted
    assert services.jobs_slurm_lookup() == 0
    odd.refresh_from_db()
    assert (odd.lookup, odd.lookup_tries) == ("pending", 1)
    stub.answers[f"{CTLD}41"] = (500, errors("Unspecified error"))
    for _ in range(services.LOOKUP_TRIES - 1):
        services.jobs_slurm_lookup()
    odd.refresh_from_db()
    assert (odd.lookup, odd.lookup_tries, odd.user) == ("gave_up", services.LOOKUP_TRIES, None)
