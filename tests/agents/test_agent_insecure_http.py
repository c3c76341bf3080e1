"""The agent never sends its host token in clear text across a network by accident: an http://
portal that is not on this machine needs --insecure-http (or GPU_AGENT_INSECURE_HTTP, or
insecure_http in the config file); loopback portals (the demo's) need nothing."""

from __future__ import annotations

import pytest

from agents.config import ConfigError, load_config

TOKEN = {"GPU_AGENT_TOKEN": "t0k"}


@pytest.mark.parametrize(
    "url", ["http://portal.lab:8000", "http://10.0.0.5", "http://[fd00::1]:8000", "http://localhost.evil.com"]
)
def test_http_to_another_machine_is_refused_with_a_clear_message(url):
    with pytest.raises(ConfigError) as refused:
        load_config([], {**TOKEN, "GPU_AGENT_URL": url})
    message = str(refused.value)
    assert "clear text" in message and "--insecure-http" in message and "https://" in message


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000",
                                 "http://127.8.9.10", "https://portal.lab"])  # fmt: skip
def test_loopback_and_https_need_nothing(url):
    assert load_config([], {**TOKEN, "GPU_AGENT_URL": url}).url == url


def test_insecure_http_by_flag_environment_or_file(tmp_path):
    url = {"GPU_AGENT_URL": "http://portal.lab:8000"}
    assert load_config(["--insecure-http"], {**TOKEN, **url}).insecure_http is True
    assert load_config([], {**TOKEN, **url, "GPU_AGENT_INSECURE_HTTP": "true"}).insecure_http is True
    toml = tmp_path / "agent.toml"
    toml.write_text("insecure_http = true\n")
    assert load_config(["--config", str(toml)], {**TOKEN, **url}).insecure_http is True
