"""Configuration by flags, GPU_AGENT_* variables and a TOML file."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from agents.config import FLAG_ONLY, Config, ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]
BASE = {"GPU_AGENT_URL": "https://portal.example.com", "GPU_AGENT_TOKEN": "t0k"}


def test_defaults():
    config = load_config([], dict(BASE))
    assert config.interval == 10 and config.batch_interval == 10 and config.max_batch_readings == 500
    assert config.token == "t0k" and config.url == "https://portal.example.com"


def test_precedence_flag_over_environment_over_file(tmp_path):
    toml = tmp_path / "agent.toml"
    toml.write_text('interval = 30\nspool_dir = "/srv/spool"\nspool-max-mb = 8\ntimeout = 4\n')
    env = {**BASE, "GPU_AGENT_CONFIG": str(toml), "GPU_AGENT_INTERVAL": "20", "GPU_AGENT_TIMEOUT": "3"}
    config = load_config(["--interval", "5"], env)
    assert (config.interval, config.timeout, config.spool_dir, config.spool_max_mb) == (5.0, 3.0, "/srv/spool", 8.0)
    assert config.batch_interval == 5.0


def test_token_file(tmp_path):
    (tmp_path / "token").write_text("s3cret\n")
    config = load_config(["--token-file", str(tmp_path / "token")], {"GPU_AGENT_URL": "https://x"})
    assert config.token == "s3cret"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"GPU_AGENT_TOKEN": "t"}, "no portal URL"),
        ([], {"GPU_AGENT_URL": "http://x"}, "no host token"),
        (["--interval", "soon"], BASE, "--interval"),
        ([], {**BASE, "GPU_AGENT_INTERVAL": "-1"}, "interval must be positive"),
        ([], {**BASE, "GPU_AGENT_SIMULATE": "two"}, "GPU_AGENT_SIMULATE"),
        (["--url", "portal:8000"], BASE, "http"),
    ],
)
def test_bad_values_fail_loudly(argv, env, message):
    with pytest.raises(ConfigError, match=message):
        load_config(argv, env)


def test_unknown_setting_in_file_fails(tmp_path):
    toml = tmp_path / "agent.toml"
    toml.write_text("intervall = 3\n")
    with pytest.raises(ConfigError, match="intervall"):
        load_config(["--config", str(toml)], BASE)


def test_stdout_needs_no_url_or_token_and_simulated_hostname_is_stable():
    first = load_config(["--stdout", "--simulate", "2"], {})
    second = load_config(["--stdout", "--simulate", "2"], {})
    assert first.hostname.startswith("sim-") and first.hostname == second.hostname


def test_help_documents_every_setting():
    result = subprocess.run(
        [sys.executable, "-m", "agents", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
        timeout=30,
    )
    assert result.returncode == 0
    for field in fields(Config):
        assert "--" + field.name.replace("_", "-") in result.stdout
        if field.name not in FLAG_ONLY:
            assert "GPU_AGENT_" + field.name.upper() in result.stdout


def test_a_configuration_error_exits_2_with_a_message():
    result = subprocess.run(
        [sys.executable, "-m", "agents"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in {**os.environ, "PYTHONPATH": str(REPO)}.items() if not k.startswith("GPU_AGENT_")},
    )
    assert result.returncode == 2 and "no portal URL" in result.stderr
