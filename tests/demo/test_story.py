"""The demo's story: simulated hosts ready to push, and a day of history stored once."""

import datetime as dt

import pytest

from agents.config import load_config
from portal.demo import story
from portal.fleet.models import Gpu, Host
from portal.maintenance.rules import AGENT_SILENT
from portal.maintenance.services.config import RuleParams
from portal.telemetry.models import Reading, Rollup1m
from portal.telemetry.services import host_token_authenticate

pytestmark = pytest.mark.django_db


def test_simulated_hosts_get_working_tokens_reused_on_the_next_run_and_a_short_silence(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    tokens = story.prepare_simulated_hosts()
    assert set(tokens) == {hostname for hostname, *_ in story.SIMULATED_HOSTS}
    assert all(host_token_authenticate(token) for token in tokens.values())
    assert story.prepare_simulated_hosts() == tokens
    host = Host.objects.get(hostname="sim-desk-c")
    assert RuleParams().get(AGENT_SILENT.key, host.pk)[1]["silent_after_s"] == story.DEMO_SILENT_AFTER_S


def test_history_is_stored_through_ingest_once_and_rolled_up(settings, tmp_path):
    from tests.pipeline import rollups_process_pending, stage_waiting

    settings.VAR_DIR = tmp_path
    story.prepare_simulated_hosts()
    stored = story.backfill_history(span=dt.timedelta(minutes=30))
    hosts = len(story.SIMULATED_HOSTS)
    assert stored == Reading.objects.count() == hosts * 4 * 10  # every 3 minutes
    assert Gpu.objects.filter(host__hostname__startswith="sim-").count() == hosts * 4
    assert story.backfill_history(span=dt.timedelta(minutes=30)) == 0  # once
    while rollups_process_pending():
        pass
    assert Rollup1m.objects.count() == hosts * 4 * 10
    assert stage_waiting("rollups") == 0
    # Training jobs, not noise: most minutes busy, all within the protocol's ranges.
    busy = Reading.objects.filter(utilization_gpu_pct__gte=30).count()
    assert busy > 0.6 * stored


def test_demo_agents_reach_a_lan_address_portal_without_refusing_plain_http(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    for base_url, flagged in (("http://127.0.0.1:8000", False), ("http://192.168.1.20:8000", True)):
        for _, _, command in story.agent_commands(base_url, 60.0):
            assert ("--insecure-http" in command) is flagged
            assert load_config(command[3:], {"GPU_AGENT_TOKEN": "t"}).url == base_url
