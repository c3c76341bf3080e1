"""deploy/systemd: the web, worker and beat units parse cleanly with systemd's own checker, run as
an unprivileged user with the agent unit's hardening, start the portal's real commands, and read
an environment file whose every variable the portal (or the unit) knows."""

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
UNITS = sorted((REPO / "deploy" / "systemd").glob("*.service"))
HARDENING = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
             "ProtectKernelTunables": "yes", "ProtectControlGroups": "yes"}  # fmt: skip


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(path)
    return parser


def test_the_three_roles_are_shipped():
    assert {path.name for path in UNITS} == {"gpu-fleet-web.service", "gpu-fleet-worker@.service",
                                             "gpu-fleet-beat.service"}  # fmt: skip


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_hardened_like_the_agent_and_unprivileged(path):
    agent = unit(REPO / "agents" / "gpu-agent.service")["Service"]
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
        assert (REPO / "portal" / "core" / "management" / "commands" / "serve.py").exists()


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
