"""deploy/systemd: the web, worker and beat units parse cleanly with systemd's own checker, run as
an unprivileged user with the agent unit's hardening, start the portal's real commands, and read
an environment file whose every variable the portal (or the unit) knows."""

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agents.cli import unit_text as agent_unit_text
from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
UNITS = sorted((REPO / "deploy" / "systemd").glob("*.service"))
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
             "ProtectKernelTunables": "yes", "ProtectControlGroups": "yes"}  # fmt: skip


def unit(path: Path) -> configparser.ConfigParser:
    return unit_of_text(path.read_text())


def unit_of_text(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(text)
    return parser


def test_the_agent_has_one_unit_generated_from_one_text():
    # install.sh runs `gpu-fleet-agent install-service`, which writes agents.cli's unit: no second copy.
    assert list(REPO.glob("agents/*.service")) == []
    service = unit_of_text(agent_unit_text(executable="/x/gpu-fleet-agent"))["Service"]
    assert service["User"] == "gpu-fleet-agent" and service["StateDirectory"] == "gpu-fleet-agent"
    assert service["ExecStart"] == (
        "/x/gpu-fleet-agent run --config /etc/gpu-fleet-agent/agent.toml --spool-dir /var/lib/gpu-fleet-agent"
    )


def test_the_agent_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_or_fail("systemd-analyze missing (Debian's systemd package)")
    executable = tmp_path / "gpu-fleet-agent"
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    path = tmp_path / "gpu-fleet-agent.service"
    path.write_text(agent_unit_text(executable=str(executable)))
    result = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if "gpu-fleet-agent.service" in line]
    assert result.returncode == 0 and problems == [], result.stderr


def test_the_three_roles_are_shipped():
    assert {path.name for path in UNITS} == {"gpu-fleet-web.service", "gpu-fleet-worker@.service",
                                             "gpu-fleet-beat.service"}  # fmt: skip


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_hardened_like_the_agent_and_unprivileged(path):
    agent = unit_of_text(agent_unit_text(executable="/opt/gpu-fleet-agent/bin/gpu-fleet-agent"))["Service"]
    service = unit(path)["Service"]
    for key, value in HARDENING.items():
        assert agent[key] == value and service[key] == value, key
    assert service["User"] not in ("", "root") and service["Restart"] == "always"


@pytest.mark.parametrize(
    ("name", "command"),
    [("gpu-fleet-web.service", "manage.py serve"), ("gpu-fleet-worker@.service", "celery -A portal worker"),
     ("gpu-fleet-beat.service", "celery -A portal beat")],
)  # fmt: skip
def test_each_unit_starts_the_portals_own_command(name, command):
    exec_start = unit(REPO / "deploy" / "systemd" / name)["Service"]["ExecStart"]
    assert command in exec_start
    if "manage.py serve" in command:
        assert (REPO / "portal" / "ops" / "management" / "commands" / "serve.py").exists()


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verify_is_clean(path, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_or_fail("systemd-analyze missing (Debian's systemd package)")
    # verify checks that ExecStart's program exists: point it at this machine's Python.
    text = re.sub(r"/opt/gpu-fleet/\.venv/bin/(python|celery)", "/usr/bin/python3", path.read_text())
    (tmp_path / path.name).write_text(text)
    name = path.name.replace("@.service", "@1.service")
    result = subprocess.run([analyze, "verify", str(tmp_path / name)], capture_output=True, text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if path.name.split("@")[0] in line]
    assert result.returncode == 0 and problems == [], result.stderr


# What every portal unit sets beyond the agent's hardening (docs/production.md, "systemd hardening").
PORTAL_HARDENING = {
    "UMask": "0027", "PrivateDevices": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6", "RestrictNamespaces": "yes",
    "CapabilityBoundingSet": "", "NoNewPrivileges": "yes",
}  # fmt: skip
# systemd-analyze's verdicts, best first: "OK or better" is the first four (exposure below 5.0).
VERDICTS = ["PERFECT", "SAFE", "OK", "MEDIUM", "EXPOSED", "UNSAFE", "DANGEROUS"]


def unit_lines(path: Path) -> dict[str, list[str]]:
    """Every assignment in [Service], repeated keys kept in order (configparser keeps the last)."""
    section, lines = None, {}
    for line in path.read_text().splitlines():
        if line.startswith("["):
            section = line.strip()
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            lines.setdefault(key, []).append(value)
    return lines


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_sandboxed_beyond_the_agents_hardening(path):
    lines = unit_lines(path)
    for key, value in PORTAL_HARDENING.items():
        assert lines.get(key) == [value], key
    assert lines["SystemCallFilter"][0] == "@system-service"


def analyzed(path: Path, tmp_path: Path) -> tuple[float, str]:
    """`systemd-analyze security --offline=true` of the unit as installed: (exposure, verdict)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_or_fail("systemd-analyze missing (Debian's systemd package)")
    text = re.sub(r"/opt/gpu-fleet/\.venv/bin/(python|celery)", "/usr/bin/python3", path.read_text())
    name = path.name.replace("@.service", "@1.service")
    (tmp_path / name).write_text(text)
    result = subprocess.run([analyze, "security", "--offline=true", "--no-pager", str(tmp_path / name)],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\w+)", result.stdout)
    assert found, result.stdout + result.stderr
    return float(found.group(1)), found.group(2)


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_security_is_ok_or_better(path, tmp_path):
    exposure, verdict = analyzed(path, tmp_path)
    assert VERDICTS.index(verdict) <= VERDICTS.index("OK"), (exposure, verdict)


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_production_docs_report_each_units_exposure(path, tmp_path):
    exposure, verdict = analyzed(path, tmp_path)
    docs = (REPO / "docs" / "production.md").read_text()
    assert f"| `{path.name}` | {exposure} | {verdict} |" in docs


def test_environment_file_names_only_known_settings():
    settings_source = "".join(
        (REPO / "portal" / name).read_text() for name in ("settings.py", "env.py", "directory_settings.py")
    )
    unit_text = "".join(path.read_text() for path in UNITS)
    example = (REPO / "deploy" / "portal.env.example").read_text()
    names = re.findall(r"^#?([A-Z_][A-Z0-9_]*)=", example, flags=re.MULTILINE)  # commented-out examples too
    assert "SECRET_KEY" in names and "DATABASE_URL" in names and "REDIS_URL" in names
    unknown = [n for n in names if f'"{n}"' not in settings_source and "${" + n + "}" not in unit_text]
    assert unknown == []
