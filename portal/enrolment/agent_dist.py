"""The agent's distribution, served at /agent/: its wheel built from the tree (agents/), and the
wheel of its one dependency, so that a host without internet access installs from the portal.

The wheel is written here with zipfile rather than by a build backend: it is pure Python, and
this way building needs nothing that a fresh checkout or an offline CI runner might lack. Its
metadata comes from agents/pyproject.toml, so `pip install ./agents` and the served wheel agree.
"""

import base64
import hashlib
import io
import re
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

AGENT_DIR = Path(settings.BASE_DIR) / "agents"
WHEEL_FILE = b"Wheel-Version: 1.0\nGenerator: gpu-fleet-portal\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # reproducible: the same tree gives the same wheel


class AgentDistError(Exception):
    pass


@dataclass(frozen=True)
class AgentProject:
    name: str
    version: str
    requires_python: str
    dependencies: list[str]
    scripts: dict[str, str]
    summary: str

    @property
    def wheel_name(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


def agent_project() -> AgentProject:
    project = tomllib.loads((AGENT_DIR / "pyproject.toml").read_text())["project"]
    match = re.search(r'^__version__ = "([^"]+)"', (AGENT_DIR / "__init__.py").read_text(), re.M)
    if match is None:
        raise AgentDistError("agents/__init__.py has no __version__")
    return AgentProject(
        name=project["name"], version=match.group(1), requires_python=project.get("requires-python", ""),
        dependencies=list(project.get("dependencies", [])), scripts=dict(project.get("scripts", {})),
        summary=project.get("description", ""),
    )  # fmt: skip


def dist_dir() -> Path:
    path = Path(settings.AGENT_DIST_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def agent_wheel_bytes(project: AgentProject) -> bytes:
    dist_info = f"{project.name.replace('-', '_')}-{project.version}.dist-info"
    files: list[tuple[str, bytes]] = [
        (f"agents/{path.name}", path.read_bytes()) for path in sorted(AGENT_DIR.glob("*.py"))
    ]
    metadata = [
        "Metadata-Version: 2.1", f"Name: {project.name}", f"Version: {project.version}",
        f"Summary: {project.summary}", f"Requires-Python: {project.requires_python}",
        *(f"Requires-Dist: {dependency}" for dependency in project.dependencies),
    ]  # fmt: skip
    files += [
        (f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()),
        (f"{dist_info}/WHEEL", WHEEL_FILE),
        (f"{dist_info}/entry_points.txt",
         ("[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in project.scripts.items())).encode()),
        (f"{dist_info}/top_level.txt", b"agents\n"),
    ]  # fmt: skip
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files) + f"{dist_info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in [*files, (f"{dist_info}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data)
    return buffer.getvalue()


def agent_wheel_build() -> Path:
    """The agent's wheel under AGENT_DIST_DIR, written again when the tree changed."""
    project = agent_project()
    target = dist_dir() / project.wheel_name
    data = agent_wheel_bytes(project)
    if not target.exists() or target.read_bytes() != data:
        partial = target.with_suffix(".part")
        partial.write_bytes(data)
        partial.replace(target)
    return target


def _pinned(dependency: str) -> tuple[str, str]:
    name, _, version = dependency.partition("==")
    if not version:
        raise AgentDistError(f"agents/pyproject.toml: pin {dependency!r} with == so the portal can serve it")
    return name.strip(), version.strip()


def dependency_wheels() -> list[Path]:
    found = []
    for dependency in agent_project().dependencies:
        name, version = _pinned(dependency)
        stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
        found += [p for p in dist_dir().glob("*.whl") if p.name.lower().startswith(stem)]
    return found


def dependency_wheels_fetch() -> list[Path]:
    """Download the pinned dependencies' wheels (pip's cache serves them when offline)."""
    for dependency in agent_project().dependencies:
        name, version = _pinned(dependency)
        command = [sys.executable, "-m", "pip", "download", "-q", f"{name}=={version}", "--no-deps",
                   "--only-binary=:all:", "-d", str(dist_dir())]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise AgentDistError(f"pip download {name}=={version} failed: {result.stderr.strip()[-500:]}")
    return dependency_wheels()


def agent_dist_files() -> list[Path]:
    """Every file /agent/ serves (the agent's wheel first), building the agent's wheel if stale."""
    return [agent_wheel_build(), *dependency_wheels()]
