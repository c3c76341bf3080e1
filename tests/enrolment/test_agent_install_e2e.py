"""The whole way onto a new GPU host, against a running portal: install.sh in a throwaway root
(a fake systemctl, useradd and chown) makes a fresh venv, installs the agent's wheel with
`pip --no-index` from the portal's /agent/ alone, enrols with a code; the installed agent then
runs one collection with the simulator and the host and its GPUs are in the API. pip installs
only wheels whose sha256 the install line names (--require-hashes)."""

import json
import os
import shutil
import stat
import subprocess
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.portal_process import manage, migrate, portal_env, running_portal

pytestmark = pytest.mark.slow

FAKE_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
[ "$(basename "$0")" = systemctl ] && [ "$1" = is-active ] && [ -n "{fail_active}" ] && exit 3
exit 0
"""

MAKE_CODE = """
from portal.accounts.services import api_token_issue
from portal.enrolment.services import enrolment_code_create
from tests.factories import UserFactory
admin = UserFactory(username="root-admin", role="admin")
print(enrolment_code_create(created_by=admin, uses=4).code, api_token_issue(user=admin)[0])
"""


def fake_tools(directory: Path, log: Path, *, fail_active: bool = False) -> dict[str, str]:
    directory.mkdir()
    for name in ("systemctl", "useradd", "chown"):
        tool = directory / name
        tool.write_text(FAKE_TOOL.format(log=log, fail_active="yes" if fail_active else ""))
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}"}


def wheel_hashes(base_url: str) -> list[str]:
    """The --sha256 arguments the install line carries, from /agent/version's `files`."""
    files = json.loads(urllib.request.urlopen(base_url + "/agent/version", timeout=30).read())["files"]
    return [word for name, digest in files.items() for word in ("--sha256", f"{name}={digest}")]


def install(
    base_url: str, code: str | None, root: Path, env: dict, *extra: str, trace: Path | None = None, hashes=None
) -> subprocess.CompletedProcess:
    """install.sh as the Add hosts page's line runs it: the code in GPU_FLEET_ENROL_CODE, each wheel's
    sha256 on the line. With `trace`, strace records the argv of every process it starts, children's
    children included."""
    script = urllib.request.urlopen(base_url + "/agent/install.sh", timeout=30).read()
    hashes = wheel_hashes(base_url) if hashes is None else hashes
    command = ["sh", "-s", "--", "--url", base_url, "--root", str(root), *hashes, *extra]
    if trace is not None:
        strace = shutil.which("strace")
        if strace is None:
            skip_or_fail("strace missing (Debian's strace): it records every child's argv")
        command = [strace, "-f", "-qq", "-e", "trace=execve", "-s", "100000", "-o", str(trace), *command]
    env = {k: v for k, v in env.items() if k != "GPU_FLEET_ENROL_CODE"}
    if code is not None:
        env["GPU_FLEET_ENROL_CODE"] = code
    return subprocess.run(command, input=script, capture_output=True, env=env, timeout=300)


def dry_run(base_url: str, token: str) -> int:
    request = urllib.request.Request(
        base_url + "/api/v1/ingest", data=b"{}", method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", "X-Dry-Run": "1"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def api_get(base_url: str, path: str, token: str) -> dict:
    request = urllib.request.Request(base_url + path, headers={"Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_install_sh_from_the_portal_alone_enrols_and_the_agent_reports(tmp_path):
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    env = portal_env(var_dir)
    migrate(env)
    built = manage(env, "agent_dist", check=False)
    if built.returncode != 0:
        skip_or_fail(f"the agent's dependency wheel could not be fetched: {built.stderr[-500:]}")
    code, api_token = manage(env, "shell", "-c", MAKE_CODE).stdout.split()[-2:]
    with running_portal(env, var_dir) as portal:
        index = urllib.request.urlopen(portal.base_url + "/agent/", timeout=30).read().decode()
        version = json.loads(urllib.request.urlopen(portal.base_url + "/agent/version", timeout=30).read())
        assert version["wheel"] in index and "nvidia_ml_py-" in index

        # A failing step stops the installer, is named, and leaves nothing running.
        log = tmp_path / "tools.log"
        failing_root = tmp_path / "failing-root"
        result = install(portal.base_url, "gfe_wrong", failing_root, fake_tools(tmp_path / "bin1", log))
        assert result.returncode != 0
        assert b"FAILED at step: enrol with the portal" in result.stderr and b"HTTP 400" in result.stderr
        assert not (failing_root / "opt/gpu-fleet-agent").exists()
        assert not log.exists()  # systemctl never ran

        # A wheel whose sha256 is not the one the install line names is refused by pip
        # (--require-hashes); the venv made for it is removed, and the token the code became is kept
        # (0600) for a run that finishes the job.
        tampered = [word if not word.startswith(version["wheel"]) else f"{version['wheel']}={'0' * 64}"
                    for word in wheel_hashes(portal.base_url)]  # fmt: skip
        tampered_root = tmp_path / "tampered-root"
        result = install(portal.base_url, code, tampered_root, fake_tools(tmp_path / "bin0", log),
                         "--hostname", "e2e-tampered", hashes=tampered)  # fmt: skip
        assert result.returncode != 0 and b"FAILED at step: package" in result.stderr
        assert b"THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr
        assert not (tampered_root / "opt/gpu-fleet-agent").exists() and not log.exists()
        assert stat.S_IMODE((tampered_root / "etc/gpu-fleet-agent/enrolment.json").stat().st_mode) == 0o600

        root = tmp_path / "root"
        tools_env = fake_tools(tmp_path / "bin2", log)
        trace = tmp_path / "execve.log"
        result = install(portal.base_url, code, root, tools_env, "--hostname", "e2e-gpu-01", trace=trace)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        out = result.stdout.decode()
        # The code is redeemed before anything is downloaded.
        assert out.index("==> enrol with the portal") < out.index("==> venv") < out.index("==> package")
        agent = root / "opt/gpu-fleet-agent/bin/gpu-fleet-agent"
        config = root / "etc/gpu-fleet-agent/agent.toml"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600 and "gfh_" in config.read_text()
        assert not (root / "etc/gpu-fleet-agent/enrolment.json").exists()  # handed over, then removed
        # Neither the code nor the token it became is in any process's argv (/proc/*/cmdline,
        # readable by every user of the node): curl, python, pip, the agent, systemctl.
        token = tomllib.loads(config.read_text())["token"]
        calls = trace.read_text()
        assert "execve(" in calls and "/curl" in calls and "/pip" in calls and "enrol" in calls
        assert code not in calls and token not in calls
        unit = (root / "etc/systemd/system/gpu-fleet-agent.service").read_text()
        assert "ExecStart=/opt/gpu-fleet-agent/bin/gpu-fleet-agent run --config /etc/gpu-fleet-agent/agent.toml" in unit
        calls = log.read_text().splitlines()
        assert (
            "systemctl enable --now gpu-fleet-agent" in calls and "systemctl is-active --quiet gpu-fleet-agent" in calls
        )
        assert (root / "var/lib/gpu-fleet-agent").is_dir()

        version_out = subprocess.run([str(agent), "--version"], capture_output=True, text=True, check=True).stdout
        assert version_out.strip() == f"gpu-fleet-agent {version['version']}"
        run = subprocess.run(
            [str(agent), "run", "--config", str(config), "--simulate", "2", "--once",
             "--spool-dir", str(tmp_path / "spool")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]

        # The agent rotates its token: the new one is in agent.toml (0600), the old one keeps
        # working until the first batch arrives with the new one.
        rotated = subprocess.run([str(agent), "rotate-token", "--config", str(config)], capture_output=True,
                                 text=True, timeout=60)  # fmt: skip
        assert rotated.returncode == 0, rotated.stderr[-3000:]
        new_token = tomllib.loads(config.read_text())["token"]
        assert new_token != token and stat.S_IMODE(config.stat().st_mode) == 0o600
        assert dry_run(portal.base_url, token) == 200 and dry_run(portal.base_url, new_token) == 200
        run = subprocess.run(run.args, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        assert dry_run(portal.base_url, token) == 401 and dry_run(portal.base_url, new_token) == 200

        # A service that does not come up is stopped and its unit removed; the enrolment is kept.
        broken_root, broken_log = tmp_path / "broken-root", tmp_path / "broken.log"
        broken_env = fake_tools(tmp_path / "bin3", broken_log, fail_active=True)
        result = install(portal.base_url, code, broken_root, broken_env, "--hostname", "e2e-gpu-02")
        assert result.returncode != 0 and b"FAILED at step: start: the service runs" in result.stderr
        assert "systemctl disable --now gpu-fleet-agent" in broken_log.read_text().splitlines()
        assert not (broken_root / "etc/systemd/system/gpu-fleet-agent.service").exists()
        assert (broken_root / "etc/gpu-fleet-agent/agent.toml").exists()

        # Redeemed, but the package step fails (the dependency's wheel is gone from /agent/): the
        # token is kept, 0600, and a second run without a code finishes the job.
        late_root = tmp_path / "late-root"
        hidden = tmp_path / "hidden-wheels"
        hidden.mkdir()
        moved = [wheel.rename(hidden / wheel.name) for wheel in (var_dir / "agent-dist").glob("nvidia_ml_py-*")]
        try:
            result = install(portal.base_url, code, late_root, fake_tools(tmp_path / "bin4", tmp_path / "late.log"),
                             "--hostname", "e2e-gpu-03")  # fmt: skip
        finally:
            for wheel in moved:
                wheel.rename(var_dir / "agent-dist" / wheel.name)
        assert result.returncode != 0 and b"FAILED at step: package" in result.stderr, result.stderr[-2000:]
        assert b"run install.sh again with the same --url and no code" in result.stderr
        kept = late_root / "etc/gpu-fleet-agent/enrolment.json"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and "gfh_" in kept.read_text()
        assert not (late_root / "opt/gpu-fleet-agent").exists()
        result = install(portal.base_url, None, late_root, fake_tools(tmp_path / "bin5", tmp_path / "late2.log"))
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        assert b"redeemed by an earlier run" in result.stdout and not kept.exists()
        assert tomllib.loads((late_root / "etc/gpu-fleet-agent/agent.toml").read_text())["hostname"] == "e2e-gpu-03"

        hosts = api_get(portal.base_url, "/api/v1/hosts?q=e2e-gpu-01", api_token)
        assert [host["hostname"] for host in hosts["items"]] == ["e2e-gpu-01"]
        gpus = api_get(portal.base_url, "/api/v1/gpus?host=e2e-gpu-01", api_token)
        assert gpus["count"] == 2
