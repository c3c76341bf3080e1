"""install.sh's enrolment step on its own, with a stand-in curl on PATH: the code goes to curl on
stdin (never argv), a refusal stops before anything is installed, and a plain-HTTP portal on
another machine is refused before the code is sent. (test_agent_install_e2e runs it for real.)"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "portal" / "enrolment" / "install.sh"
FAKE_CURL = """#!/bin/sh
echo "$*" >> "{log}.argv"
cat > "{log}.stdin"
while [ $# -gt 0 ]; do
  case "$1" in --output) out="$2"; shift 2 ;; *) shift ;; esac
done
printf '%s' '{answer}' > "$out"
printf '%s' '{status}'
"""
# The install line always names each wheel's sha256 (checked before anything else is looked at).
HASH = ["--sha256", f"gpu_fleet_agent-0.1.0-py3-none-any.whl={'ab' * 32}"]


def run_install(tmp_path: Path, *args: str, code: str | None = "gfe_secret", status=409, answer=None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    answer = answer or {"error": "host dgx-01 already exists", "detail": [{"loc": "hostname", "msg": "taken"}]}
    curl = bin_dir / "curl"
    curl.write_text(FAKE_CURL.format(log=tmp_path / "curl", answer=json.dumps(answer), status=status))
    curl.chmod(curl.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("GPU_FLEET_ENROL_CODE", None)
    if code is not None:
        env["GPU_FLEET_ENROL_CODE"] = code
    return subprocess.run(
        ["sh", str(SCRIPT), "--root", str(tmp_path / "root"), "--python", sys.executable, *HASH, *args],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


def test_the_code_goes_to_curl_on_stdin_and_a_refusal_installs_nothing(tmp_path):
    result = run_install(tmp_path, "--url", "https://portal.example", "--hostname", "dgx-01")
    assert result.returncode == 1 and "FAILED at step: enrol with the portal" in result.stderr
    assert "HTTP 409: host dgx-01 already exists (hostname: taken)" in result.stderr
    assert json.loads((tmp_path / "curl.stdin").read_text()) == {"code": "gfe_secret", "hostname": "dgx-01"}
    argv = (tmp_path / "curl.argv").read_text()
    assert "gfe_secret" not in argv and "https://portal.example/api/v1/enrol" in argv and "--data-binary @-" in argv
    assert not (tmp_path / "root/opt").exists()
    assert list((tmp_path / "root/etc/gpu-fleet-agent").iterdir()) == []  # the answer file is removed


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--url", "http://portal.lab"], "gfe_secret", "refusing the plain-HTTP portal"),
        (["--url", "ftp://portal.lab"], "gfe_secret", "--url must start with"),
        (["--url", "https://portal.example"], None, "no enrolment code"),
        ([], "gfe_secret", "usage:"),
    ],
)
def test_bad_input_stops_before_the_code_is_sent(tmp_path, args, code, message):
    result = run_install(tmp_path, *args, code=code)
    assert result.returncode != 0 and message in result.stderr
    assert not (tmp_path / "curl.argv").exists() and not (tmp_path / "root/opt").exists()


def test_plain_http_to_a_lan_portal_only_with_insecure_http_and_loopback_always(tmp_path):
    for url, extra in (("http://portal.lab", ["--insecure-http"]), ("http://127.0.0.1:8000", [])):
        result = run_install(tmp_path, "--url", url, *extra)
        assert "HTTP 409" in result.stderr, result.stderr
