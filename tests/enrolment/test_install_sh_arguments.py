"""install.sh refuses a line without the wheels' sha256 (or with a malformed one) before it
touches anything: pip installs only with --require-hashes."""

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "portal" / "enrolment" / "install.sh"
GOOD = "gpu_fleet_agent-1.0.0-py3-none-any.whl=" + "a" * 64


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), "--url", "http://portal.invalid", "--code", "gfe_x", "--root",
                           "/nonexistent-root", *args], capture_output=True, text=True, timeout=30)  # fmt: skip


def test_without_sha256_it_refuses_naming_the_add_hosts_page():
    result = run()
    assert result.returncode == 2 and "no --sha256" in result.stderr and "Add hosts" in result.stderr
    assert "==>" not in result.stdout  # no step started


@pytest.mark.parametrize(
    "pair",
    [
        "gpu_fleet_agent-1.0.0-py3-none-any.whl=" + "a" * 63,  # short
        "gpu_fleet_agent-1.0.0-py3-none-any.whl=" + "A" * 64,  # not lower-case hex
        "gpu_fleet_agent-1.0.0-py3-none-any.whl=" + "g" * 64,
        "gpu_fleet_agent.whl=" + "a" * 64,  # no name-version
        "gpu_fleet_agent-1.0.0-py3-none-any.whl",  # no hash
        "x-1-y.whl;rm -rf /=" + "a" * 64,  # text is data
        "",
    ],
)
def test_a_malformed_sha256_is_refused(pair):
    result = run("--sha256", GOOD, "--sha256", pair)
    assert result.returncode == 2 and "--sha256" in result.stderr, result.stderr
    assert "==>" not in result.stdout
