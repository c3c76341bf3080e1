"""The job list and job pages, the GPU page's jobs panel and the jobs a ticket names (API and page)."""

import datetime as dt
import json
from urllib.parse import quote

import pytest
from django.test import override_settings
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.selectors import tickets_jobs_shown
from portal.maintenance.models import Ticket
from tests.jobs.helpers import STEP, host_for, reading, run, store
from tests.telemetry.batches import gpu_uuid

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
START = NOW - dt.timedelta(hours=2)
ODD_KEY = "user:<b>x?y#z</b>"


@pytest.fixture
def lab():
    host = host_for("dgx-p")
    uuid = gpu_uuid(100 * host.pk)
    readings = [reading(uuid, START + n * STEP, ["slurm:77", ODD_KEY] if n < 30 else ["user:bo"], n) for n in range(60)]
    store(host, readings, now=NOW)
    run()
    gpu = host.gpus.get()
    at = START + 29 * STEP
    ticket = Ticket.objects.create(fingerprint="t", rule="xid_bus", host=host, gpu=gpu, title="GPU fell off the bus",
                                   severity="critical", first_seen=at, last_seen=at)  # fmt: skip
    return {"host": host, "gpu": gpu, "ticket": ticket}


def test_the_job_page_shows_its_gpus_timeline_and_tickets(lab, client_for, viewer):
    page = client_for(viewer).get("/jobs/" + quote("slurm:77", safe="") + "/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="job-chart"' in html and "plotly-cartesian.min.js" in html and "jobs/job.js" in html
    assert lab["gpu"].get_absolute_url() in html and lab["ticket"].get_absolute_url() in html
    assert client_for(viewer).get("/jobs/" + quote("slurm:78", safe="") + "/").status_code == 404


def test_a_typed_key_is_escaped_and_its_url_works(lab, client_for, viewer):
    listing = client_for(viewer).get("/jobs/").content.decode()
    assert "<b>x" not in listing and "&lt;b&gt;x?y#z&lt;/b&gt;" in listing
    page = client_for(viewer).get("/jobs/" + quote(ODD_KEY, safe="") + "/")
    assert page.status_code == 200 and "&lt;b&gt;" in page.content.decode()


def test_the_job_list_filters_and_refuses_a_bad_flag(lab, client_for, viewer):
    client = client_for(viewer)
    html = client.get("/jobs/", {"user": "bo"}).content.decode()
    assert "user:bo" in html and "slurm:77" not in html
    assert client.get("/jobs/", {"idle": "perhaps"}).status_code == 400
    assert client.get("/jobs/", {"interrupted": "true"}).status_code == 200


def test_the_gpu_page_shows_the_running_job_and_the_last_ones(lab, client_for, viewer):
    html = client_for(viewer).get(lab["gpu"].get_absolute_url()).content.decode()
    assert 'id="jobs"' in html
    running = html.split('class="running"')[1].split("</tr>")[0]
    assert "user:bo" in running and "slurm:77" in html


def test_a_ticket_names_the_jobs_on_its_gpu_when_it_opened(lab, client_for, viewer, admin):
    answer = client_for(viewer).get(f"/api/v1/tickets/{lab['ticket'].pk}")
    assert answer.status_code == 200
    assert answer.json()["jobs"] == ["slurm:77", ODD_KEY]
    html = client_for(admin).get(lab["ticket"].get_absolute_url()).content.decode()
    assert 'id="ticket-jobs"' in html and "/jobs/slurm:77/" in html
    assert "/jobs/user:%3Cb%3Ex%3Fy%23z%3C/b%3E/" in html


def test_outsiders_see_no_jobs(lab, client_for, outsider):
    assert client_for(outsider).get("/jobs/").status_code == 403
    assert client_for(outsider).get("/jobs/" + quote("slurm:77", safe="") + "/").status_code == 403


def test_a_gpu_run_flat_out_past_the_rest_policy_shows_on_its_page(client_for, viewer):
    from portal.jobs.selectors import flat_out_stretches
    from portal.maintenance.models import RuleConfig

    host = host_for("dgx-hot")
    uuid = gpu_uuid(100 * host.pk)
    # two jobs back to back at 95 %, 100 minutes in all; the policy (no_rest) says 1 hour here
    RuleConfig.objects.create(rule="no_rest", params={"open_for_s": 3600})
    readings = [reading(uuid, START + n * STEP, ["slurm:1"] if n < 100 else ["slurm:2"], n,
                        utilization_gpu_pct=95) for n in range(200)]  # fmt: skip
    store(host, readings, now=NOW)
    run()
    gpu = host.gpus.get()
    (stretch,) = flat_out_stretches(gpu_ids=[gpu.pk])
    assert stretch.jobs == ["slurm:1", "slurm:2"] and stretch.hours == pytest.approx(199 * 30 / 3600)
    assert stretch.limit_hours == 1.0 and stretch.busy_util_pct == 90
    html = client_for(viewer).get(gpu.get_absolute_url()).content.decode()
    assert "Ran flat out" in html and "slurm:2" in html
    RuleConfig.objects.update(params={"open_for_s": 4 * 3600})
    assert flat_out_stretches(gpu_ids=[gpu.pk]) == []


def test_search_finds_jobs_by_key_id_and_user_and_escapes_them(lab, client_for, viewer):
    client = client_for(viewer)
    url = "/jobs/slurm:77/"  # as the job's get_absolute_url writes it
    # a single match goes straight to it: by its key, by its id alone
    assert client.get("/search/", {"q": "slurm:77"})["Location"] == url
    assert client.get("/search/", {"q": "77"})["Location"] == url
    # several: listed, the typed key shown as text
    html = client.get("/search/", {"q": "user:"}).content.decode()
    assert 'id="search-jobs"' in html and 'href="/jobs/user:bo/"' in html
    assert "user:&lt;b&gt;x?y#z&lt;/b&gt;" in html and "<b>x?y" not in html
    assert 'id="search-jobs"' not in client.get("/search/", {"q": "nothing-like-it"}).content.decode()


def test_the_timeline_draws_times_in_the_zone_the_tables_show(lab, client_for, viewer):
    """plotly.js draws a time's wall clock whatever its offset: the chart's times are the portal's
    time zone's wall clock, as the page's tables print them (they were UTC's)."""
    with override_settings(TIME_ZONE="Asia/Shanghai"):
        page = client_for(viewer).get("/jobs/" + quote("slurm:77", safe="") + "/")
        figure = json.loads(page.context["chart"])
        shown = timezone.localtime(START).strftime("%Y-%m-%dT%H:%M")
    assert figure["data"][0]["x"][0].startswith(shown), (figure["data"][0]["x"][0], shown)
    assert "+" not in figure["data"][0]["x"][0] and "+" not in figure["layout"]["xaxis"]["range"][0]
    assert shown in page.content.decode().replace(" ", "T")  # the table's "from", the same wall clock


def test_a_tickets_jobs_show_their_user_and_name(lab, client_for, admin):
    # By key only ("slurm:77") a ticket said little (issue 48): the user and the name where known,
    # escaped (they come from the scheduler), in the same one query.
    Job.objects.filter(key="slurm:77").update(user="ana", name="<train-llm>")
    html = client_for(admin).get(lab["ticket"].get_absolute_url()).content.decode()
    panel = html.split('id="ticket-jobs"', 1)[1].split("</section>", 1)[0]
    assert 'translate="no">slurm:77</a> <span translate="no">ana · &lt;train-llm&gt;</span>' in panel
    assert "<b>" not in panel  # every text escaped
    assert tickets_jobs_shown(tickets=[lab["ticket"]])[lab["ticket"].pk][0] == {
        "key": "slurm:77", "user": "ana", "name": "<train-llm>"}  # fmt: skip
