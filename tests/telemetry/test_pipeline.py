"""`GET /api/v1/pipeline` (portal-api-v1.md, "Pipeline status"), its /metrics families and the
fleet page's Pipeline line: a stored batch waits in every stage until that stage has run."""

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.accounts.services import api_token_issue
from portal.telemetry.models import IngestBatch
from portal.telemetry.pipeline import pipeline_run
from tests.telemetry.batches import make_batch

STAGES = {"rules", "rollups", "wear", "jobs"}
URL = "/api/v1/pipeline"


@pytest.fixture(autouse=True)
def _wear_on(wear_on_ingest):
    """Every stage of the pipeline, the wear meters included."""


def _stages(client) -> dict:
    answer = client.get(URL)
    assert answer.status_code == 200, answer.content
    stages = answer.json()["stages"]
    for stage in stages:
        assert set(stage) == {"name", "backlog_batches", "oldest_pending_at", "lag_seconds"}
    return {stage["name"]: stage for stage in stages}


def _run_stages():
    pipeline_run()


def test_anonymous_is_401(db):
    assert Client().get(URL).status_code == 401


def test_a_bad_personal_token_is_401(db):
    assert Client().get(URL, headers={"Authorization": "Token nope"}).status_code == 401


def test_nothing_stored_nothing_waits(client_for, viewer):
    stages = _stages(client_for(viewer))
    assert set(stages) >= STAGES
    for stage in stages.values():
        assert (stage["backlog_batches"], stage["oldest_pending_at"], stage["lag_seconds"]) == (0, None, None)


def test_a_stored_batch_waits_in_every_stage_until_it_has_run(agent, client_for, viewer):
    # The test's transaction never commits, so ingest's hand-on (after commit) does not run: the
    # batch is stored, and no stage has touched it.
    assert agent.post(make_batch(agent.hostname, readings=3)).status_code == 202
    IngestBatch.objects.update(received_at=timezone.now() - dt.timedelta(seconds=90))
    stored_at = IngestBatch.objects.get().received_at
    stages = _stages(client_for(viewer))
    for name in STAGES:
        stage = stages[name]
        assert stage["backlog_batches"] == 1, name
        oldest = dt.datetime.fromisoformat(stage["oldest_pending_at"].replace("Z", "+00:00"))
        assert abs((oldest - stored_at).total_seconds()) < 0.001, name  # the API writes milliseconds
        assert 89 <= stage["lag_seconds"] < 120, name

    _run_stages()
    for name, stage in _stages(client_for(viewer)).items():
        assert (stage["backlog_batches"], stage["oldest_pending_at"], stage["lag_seconds"]) == (0, None, None), name


def test_a_personal_token_reads_it(agent, viewer):
    secret, _ = api_token_issue(user=viewer)
    assert agent.post(make_batch(agent.hostname)).status_code == 202
    answer = Client().get(URL, headers={"Authorization": f"Token {secret}"})
    assert answer.status_code == 200
    assert {stage["name"]: stage["backlog_batches"] for stage in answer.json()["stages"]}["rules"] == 1


def test_a_newer_batch_waits_while_an_older_one_is_done(agent, client_for, viewer):
    """A stage has finished a batch only once it has run over it: a newer batch of the same host is
    pending while an older one is done."""
    now = timezone.now()
    assert agent.post(make_batch(agent.hostname, readings=2, now=now - dt.timedelta(seconds=30))).status_code == 202
    _run_stages()
    assert _stages(client_for(viewer))["wear"]["backlog_batches"] == 0
    assert agent.post(make_batch(agent.hostname, readings=2, now=now)).status_code == 202
    assert _stages(client_for(viewer))["wear"]["backlog_batches"] == 1
    _run_stages()
    assert _stages(client_for(viewer))["wear"]["backlog_batches"] == 0


def _metric_samples(client, settings) -> dict:
    settings.METRICS_TOKEN = "scrape-secret-0123"
    answer = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-0123")
    assert answer.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(answer.content.decode())}
    return {
        name: {sample.labels["stage"]: sample.value for sample in families[name].samples}
        for name in ("gpufleet_pipeline_backlog_batches", "gpufleet_pipeline_lag_seconds")
    }


def test_metrics_give_the_same_figures_and_zero_when_nothing_waits(agent, client, settings):
    samples = _metric_samples(client, settings)
    for name in STAGES:
        assert samples["gpufleet_pipeline_backlog_batches"][name] == 0
        assert samples["gpufleet_pipeline_lag_seconds"][name] == 0
    assert agent.post(make_batch(agent.hostname)).status_code == 202
    IngestBatch.objects.update(received_at=timezone.now() - dt.timedelta(seconds=300))
    samples = _metric_samples(client, settings)
    for name in STAGES:
        assert samples["gpufleet_pipeline_backlog_batches"][name] == 1
        assert 299 <= samples["gpufleet_pipeline_lag_seconds"][name] < 400


def _fleet_page(client):
    answer = client.get("/")
    assert answer.status_code == 200
    return answer.content.decode()


def test_the_fleet_page_tells_an_admin_when_a_stage_lags_over_a_minute(agent, client_for, admin, viewer):
    assert agent.post(make_batch(agent.hostname)).status_code == 202
    assert 'id="pipeline-lag"' not in _fleet_page(client_for(admin))  # stored just now: no lag yet
    IngestBatch.objects.update(received_at=timezone.now() - dt.timedelta(minutes=5))
    page = _fleet_page(client_for(admin))
    assert 'id="pipeline-lag"' in page
    assert "rules 1 batch behind" in page
    assert 'id="pipeline-lag"' not in _fleet_page(client_for(viewer))  # admins only
    _run_stages()
    assert 'id="pipeline-lag"' not in _fleet_page(client_for(admin))


def test_batches_stored_after_an_evaluated_one_wait_until_evaluated(agent, client_for, viewer):
    assert agent.post(make_batch(agent.hostname)).status_code == 202
    _run_stages()
    for _ in range(2):
        assert agent.post(make_batch(agent.hostname)).status_code == 202
    assert _stages(client_for(viewer))["rules"]["backlog_batches"] == 2
    pipeline_run()
    assert _stages(client_for(viewer))["rules"]["backlog_batches"] == 0
