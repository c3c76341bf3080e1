"""The agent never sends its token in clear to another machine unless told to (--insecure-http)."""

from __future__ import annotations

import pytest
from portal_stub import PortalStub

from agents.config import ConfigError, load_config
from agents.push import Backoff, Deliverer, Sender
from agents.spool import Spool

TOKEN = {"GPU_AGENT_TOKEN": "t0k"}


@pytest.mark.parametrize("url", ["http://portal.lab:8000", "http://10.0.0.5", "http://[fd00::1]:8000"])
def test_plain_http_to_another_machine_is_refused_with_a_clear_message(url):
    with pytest.raises(ConfigError, match="--insecure-http") as raised:
        load_config(["--url", url], TOKEN)
    assert "in clear" in str(raised.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000", "http://127.0.0.2", "https://p.lab"]
)
def test_loopback_and_https_need_no_flag(url):
    assert load_config(["--url", url], TOKEN).url == url


def test_insecure_http_as_flag_environment_or_file(tmp_path):
    url = "http://portal.lab:8000"
    assert load_config(["--url", url, "--insecure-http"], TOKEN).insecure_http is True
    assert load_config(["--url", url], {**TOKEN, "GPU_AGENT_INSECURE_HTTP": "true"}).insecure_http is True
    toml = tmp_path / "agent.toml"
    toml.write_text("insecure_http = true\n")
    assert load_config(["--url", url, "--config", str(toml)], TOKEN).insecure_http is True
    with pytest.raises(ConfigError):
        load_config(["--url", url], {**TOKEN, "GPU_AGENT_INSECURE_HTTP": "false"})


@pytest.fixture
def stub():
    portal = PortalStub()
    yield portal
    portal.stop()


def test_the_portals_plain_http_refusal_is_held_and_logged_with_its_cause(tmp_path, stub, caplog):
    refusal = {"error": "plain HTTP refused: this portal takes agent batches over HTTPS only"}
    stub.script = [(403, refusal), (403, refusal)]
    spool = Spool(tmp_path)
    spool.add("b-1", b'{"batch_id": "b-1", "host": {"hostname": "h"}, "readings": []}')
    deliverer = Deliverer(
        spool=spool,
        sender=Sender(url=stub.url, token="tok", timeout_s=1),
        backoff=Backoff(initial_s=0.01, max_s=0.02),
        hold_backoff=Backoff(initial_s=0.4, max_s=0.4),
    )
    assert deliverer.step() >= 0.2
    assert spool.pending_count() == 1 and spool.rejected() == []
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("PORTAL REFUSED" in m and "HTTPS only" in m and "set an https:// URL" in m for m in errors)
