"""Commands in the ingest answer (ingest-v1.md, "Commands": offered until the agent reports it
started or it expires) and burn-in (BURN_IN_LEVEL): a host's first batch, and a GPU that appears
later, get a diagnostic; the fleet and host pages show it."""

import datetime as dt

import pytest
from django.db import transaction
from django.utils import timezone

from portal.core.hooks import Subscriber
from portal.diagnostics import services
from portal.diagnostics.models import Diagnostic
from portal.telemetry import hooks
from tests.diagnostics.conftest import result_body
from tests.telemetry.batches import gpu_uuid, make_batch, post_batch

pytestmark = pytest.mark.django_db

A, B, C = gpu_uuid(1), gpu_uuid(2), gpu_uuid(3)


def post(agent, gpus=(A, B)):
    return post_batch(agent.client, agent.token, make_batch(agent.host.hostname, gpus=list(gpus), readings=2))


def test_commands_offered_in_every_answer_until_started(agent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = post(agent)
    assert first.status_code == 202 and "commands" not in first.json()  # burn-in off in the tests' settings
    diagnostic = services.diagnostic_request(host=agent.host, level=2)
    expected = [{"id": str(diagnostic.pk), "kind": "diagnose", "level": 2, "gpus": sorted([A, B])}]
    for _ in range(2):
        answer = post(agent)
        assert answer.status_code == 202 and answer.json()["commands"] == expected
    batch = make_batch(agent.host.hostname, gpus=[A, B])
    post_batch(agent.client, agent.token, batch)
    duplicate = post_batch(agent.client, agent.token, batch)
    assert duplicate.status_code == 200 and duplicate.json() == {"accepted": 0, "duplicate": True, "commands": expected}
    assert agent.result(diagnostic.pk, {"started_at": timezone.now().isoformat()}).status_code == 202
    assert "commands" not in post(agent).json()


def test_commands_not_offered_once_expired_nor_to_another_host(agent, django_capture_on_commit_callbacks):
    from tests.diagnostics.conftest import agent_for

    post(agent)
    services.diagnostic_request(host=agent.host, level=1, now=timezone.now() - dt.timedelta(minutes=61))
    assert "commands" not in post(agent).json()
    services.diagnostic_request(host=agent.host, level=1)
    other = agent_for("dgx-99")
    answer = post_batch(other.client, other.token, make_batch("dgx-99", gpus=[C]))
    assert answer.status_code == 202 and "commands" not in answer.json()


def test_a_failing_command_provider_never_fails_ingest_nor_loses_the_command(agent, monkeypatch):
    post(agent)
    diagnostic = services.diagnostic_request(host=agent.host, level=1)

    def broken(*, host_id):
        raise RuntimeError("database hiccup")

    with monkeypatch.context() as patched:
        patched.setattr(hooks.host_commands, "_subscribers", [Subscriber("broken", broken)])
        answer = post(agent)
    assert answer.status_code == 202 and answer.json() == {"accepted": 2, "duplicate": False}
    assert post(agent).json()["commands"][0]["id"] == str(diagnostic.pk)


def diagnostics_queries(agent):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        answer = post(agent)
    assert answer.status_code == 202
    return [
        q["sql"] for q in captured.captured_queries if "diagnostics_" in q["sql"] or 'commands_queued_at" =' in q["sql"]
    ]


def test_commands_cost_no_query_unless_some_are_queued(agent):
    """The usual batch asks nothing (the host's commands_queued_at comes with its token); while work
    is queued, the answer looks for it; the first answer that finds none left stops the looking."""
    post(agent)
    assert diagnostics_queries(agent) == []
    diagnostic = services.diagnostic_request(host=agent.host, level=1)
    assert len(diagnostics_queries(agent)) == 1  # the requested diagnostics with their GPUs, one query
    services.diagnostic_started(diagnostic_id=diagnostic.pk, host=agent.host, started_at=timezone.now())
    looked = diagnostics_queries(agent)  # none left: the look, and the looking stops (a conditional UPDATE)
    assert len(looked) == 2 and "diagnostics_diagnostic" in looked[0] and "UPDATE" in looked[1]
    agent.host.refresh_from_db()
    assert agent.host.commands_queued_at is None
    assert diagnostics_queries(agent) == []


def test_work_queued_while_the_answer_looks_is_not_lost(agent):
    from portal.fleet import services as fleet_services

    post(agent)
    services.diagnostic_request(host=agent.host, level=1)
    agent.host.refresh_from_db()
    seen = agent.host.commands_queued_at
    newer = services.diagnostic_request(host=agent.host, level=2)  # queued after `seen` was read
    assert fleet_services.host_commands_done(host_id=agent.host.pk, seen=seen) is False
    assert str(newer.pk) in [c["id"] for c in post(agent).json()["commands"]]


# --- burn-in ------------------------------------------------------------------------------------


@pytest.fixture
def burn_in(settings):
    settings.BURN_IN_LEVEL = 1


def test_first_batch_requests_a_burn_in_of_its_new_gpus(agent, burn_in, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert post(agent).status_code == 202
    (diagnostic,) = Diagnostic.objects.all()
    assert (diagnostic.purpose, diagnostic.level, diagnostic.host_id) == ("burn_in", 1, agent.host.pk)
    assert sorted(diagnostic.gpus.values_list("gpu__uuid", flat=True)) == sorted([A, B])
    # The next answer carries it; later batches of the same GPUs request nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(agent)
    assert answer.json()["commands"][0]["id"] == str(diagnostic.pk)
    assert Diagnostic.objects.count() == 1
    # A GPU that appears later gets its own burn-in, of it alone.
    with django_capture_on_commit_callbacks(execute=True):
        post(agent, gpus=(A, B, C))
    newest = Diagnostic.objects.order_by("-requested_at").first()
    assert list(newest.gpus.values_list("gpu__uuid", flat=True)) == [C] and newest.purpose == "burn_in"


def test_a_rolled_back_batch_leaves_the_hosts_next_batch_its_burn_in(agent, gpus, burn_in,
                                                                     django_capture_on_commit_callbacks):  # fmt: skip
    with pytest.raises(RuntimeError), transaction.atomic():
        services.gpu_registered(gpu=gpus[0], source="agent")
        raise RuntimeError("the batch failed after registering its GPUs")
    with django_capture_on_commit_callbacks(execute=True):
        services.gpu_registered(gpu=gpus[0], source="agent")
        services.gpu_registered(gpu=gpus[1], source="agent")
    (diagnostic,) = Diagnostic.objects.all()
    assert diagnostic.purpose == "burn_in" and diagnostic.gpus.count() == 2


def test_burn_in_level_from_the_setting_and_zero_is_off(agent, settings, django_capture_on_commit_callbacks):
    settings.BURN_IN_LEVEL = 3
    with django_capture_on_commit_callbacks(execute=True):
        post(agent)
    assert Diagnostic.objects.get().level == 3
    settings.BURN_IN_LEVEL = 0
    with django_capture_on_commit_callbacks(execute=True):
        post(agent, gpus=(A, B, C))
    assert Diagnostic.objects.count() == 1


def test_a_refused_batch_requests_no_burn_in(agent, burn_in, django_capture_on_commit_callbacks):
    batch = make_batch(agent.host.hostname, gpus=[A])
    batch["readings"][0]["ts"] = "1999-01-01T00:00:00Z"
    with django_capture_on_commit_callbacks(execute=True):
        assert post_batch(agent.client, agent.token, batch).status_code == 400
    assert not Diagnostic.objects.exists()


def test_pages_show_burn_in_and_latest_diagnostic(agent, burn_in, client_for, viewer, technician,
                                                  django_capture_on_commit_callbacks):  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        post(agent)
    host_url = f"/hosts/{agent.host.hostname}/"
    html = client_for(viewer).get(f"{host_url}gpus/").content.decode()
    assert html.count("burn-in pending") == 2
    diagnostic = Diagnostic.objects.get()
    gpus = list(agent.host.gpus.order_by("index"))
    agent.result(diagnostic.pk, result_body(gpus, {gpus[1].uuid: "fail"}))
    html = client_for(viewer).get(f"{host_url}gpus/").content.decode()
    assert "burn-in passed" in html and "burn-in failed" in html
    page = client_for(viewer).get(host_url).content.decode()
    assert 'id="diagnostics"' in page and "burn-in failed" in page and "Run diagnostic" not in page
    page = client_for(technician).get(host_url).content.decode()
    assert "Run diagnostic on all GPUs" in page
    gpu_page = client_for(technician).get(gpus[0].get_absolute_url()).content.decode()
    assert "Run diagnostic on this GPU" in gpu_page and "PCIe pass" in gpu_page


def test_run_diagnostic_form(agent, client_for, technician, viewer, django_capture_on_commit_callbacks):
    post(agent)
    gpu = agent.host.gpus.get(index=0)
    url = f"/diagnostics/hosts/{agent.host.hostname}/request"
    assert client_for(viewer).post(url, {"level": "1"}).status_code == 403
    answer = client_for(technician).post(url, {"level": "2", "gpus": [gpu.uuid], "from": "gpu"})
    assert answer.status_code == 302 and answer["Location"].startswith(gpu.get_absolute_url())
    diagnostic = Diagnostic.objects.get()
    assert diagnostic.level == 2 and list(diagnostic.gpus.values_list("gpu_id", flat=True)) == [gpu.pk]
    assert diagnostic.requested_by == technician
    bad = client_for(technician).post(url, {"level": "9"}, follow=True)
    assert "Diagnostic not requested" in bad.content.decode() and "level" in bad.content.decode()
    assert Diagnostic.objects.count() == 1
    assert client_for(technician).post("/diagnostics/hosts/nope/request", {"level": "1"}).status_code == 404


def burn_in_tile(html: str) -> str:
    start = html.index('id="burn-in-waiting"')
    return html[start : html.index("</section>", start)]


def test_fleet_page_counts_the_gpus_waiting_for_burn_in(agent, burn_in, client_for, viewer, settings,
                                                        django_capture_on_commit_callbacks):  # fmt: skip
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.diagnostics.conftest import agent_for

    with django_capture_on_commit_callbacks(execute=True):
        post(agent)
    client = client_for(viewer)
    tile = burn_in_tile(client.get("/").content.decode())
    assert "Waiting for burn-in" in tile and "<strong data-count>2</strong>" in tile
    gpu = agent.host.gpus.get(index=1)
    assert f'<a href="{gpu.get_absolute_url()}">GPU 1 on {agent.host.hostname}</a>' in tile
    chinese = burn_in_tile(client.get("/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode())
    assert "等待老化测试" in chinese and f"{agent.host.hostname} 上的 GPU 1" in chinese

    # A failed GPU still waits; a passed one no longer does.
    gpus = list(agent.host.gpus.order_by("index"))
    agent.result(Diagnostic.objects.get().pk, result_body(gpus, {gpus[1].uuid: "fail"}))
    with CaptureQueriesContext(connection) as small:
        tile = burn_in_tile(client.get("/").content.decode())
    assert "<strong data-count>1</strong>" in tile and "GPU 0 on" not in tile and "GPU 1 on" in tile

    # The same queries for a larger fleet; past ten GPUs the tile counts the rest.
    for n in range(3):
        other = agent_for(f"dgx-1{n}")
        batch = make_batch(other.host.hostname, gpus=[gpu_uuid(10 + 4 * n + i) for i in range(4)])
        with django_capture_on_commit_callbacks(execute=True):
            post_batch(other.client, other.token, batch)
    with CaptureQueriesContext(connection) as large:
        tile = burn_in_tile(client.get("/").content.decode())
    assert len(large) == len(small)
    assert "<strong data-count>13</strong>" in tile and "and 3 more" in tile

    settings.BURN_IN_LEVEL = 0
    assert 'id="burn-in-waiting"' not in client.get("/").content.decode()
