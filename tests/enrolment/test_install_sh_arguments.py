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


def run_with_url(url: str, root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), "--url", url, "--code", "gfe_x", "--root", str(root), "--sha256", GOOD,
                           *args], capture_output=True, text=True, timeout=30)  # fmt: skip


@pytest.mark.parametrize(
    "url",
    [
        "http://127.evil.example",  # a name that begins with 127
        "http://127.0.0.1.evil.example:8000",
        "http://127.0.0.1@evil.example",  # the address as the user; the host is evil.example
        "http://127.0.0.1:80@evil.example/",
        "http://localhost.evil.example",
        "http://localhost@evil.example",
        "http://[::1].evil.example",
        "http://127.0.0.256",
        "http://127.0.0",
        "http://127.1",  # a shorthand some parsers accept, not four numbers
        "http://127.0.0.01",  # a leading zero, octal to some parsers
        "http://127.0.0.1:80x",
        "http://10.0.0.1",
    ],
)
def test_plain_http_to_a_host_that_is_not_this_machine_is_refused(url, tmp_path):
    result = run_with_url(url, tmp_path)
    assert result.returncode == 1 and "refusing the plain-HTTP portal" in result.stderr, result.stderr
    assert "==> enrol with the portal" not in result.stdout
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.255.255.254", "127.0.10.1", "localhost", "[::1]"],
)
def test_plain_http_to_this_machine_goes_on(host, tmp_path):
    from portal.demo.directory import free_port

    result = run_with_url(f"http://{host}:{free_port()}/", tmp_path)
    assert "refusing the plain-HTTP portal" not in result.stderr
    assert "==> enrol with the portal" in result.stdout  # (and then fails: nothing listens there)


def test_insecure_http_lets_a_lan_portal_through(tmp_path):
    result = run_with_url("http://portal.invalid", tmp_path, "--insecure-http")
    assert "refusing the plain-HTTP portal" not in result.stderr and "==> enrol with the portal" in result.stdout
