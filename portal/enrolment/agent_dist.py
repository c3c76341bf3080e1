"""The agent's distribution, served at /agent/: its wheel built from the tree (agents/), and the
wheel of its one dependency, so that a host without internet access installs from the portal.

A start of the portal prepares it (`agent_dist_prepare`, registered with portal.ops.startup;
`manage.py agent_dist` does the same by itself) into AGENT_DIST_DIR, under VAR_DIR: the agent's
wheel written again only when the tree changed, the dependency's fetched once with pip (its cache
serves it offline), and `manifest.json` naming each file with its sha256 and what is missing.
/agent/ serves the files the manifest names as they are: nothing is built per request.

The dependency's wheel is the one agents/requirements-dist.txt pins by sha256 (pip download
--require-hashes), and one found in the folder is served only with that sha256: the manifest, and
the install line's --sha256 made from it, certify the file the lab chose, not whatever an index
(or someone with write access to the folder) supplied.

The wheel is written here with zipfile rather than by a build backend: it is pure Python, and
this way building needs nothing that a fresh checkout or an offline CI runner might lack. Its
metadata comes from agents/pyproject.toml, so `pip install ./agents` and the served wheel agree.
"""

import base64
import hashlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from portal.core.files import folder_lock, sha256_file, write_atomic

AGENT_DIR = Path(settings.BASE_DIR) / "agents"
WHEEL_FILE = b"Wheel-Version: 1.0\nGenerator: gpu-fleet-portal\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # reproducible: the same tree gives the same wheel
MANIFEST = "manifest.json"
DEPENDENCY_PINS = AGENT_DIR / "requirements-dist.txt"

logger = logging.getLogger("portal.start")


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


def _pinned(dependency: str) -> tuple[str, str]:
    name, _, version = dependency.partition("==")
    if not version:
        raise AgentDistError(f"agents/pyproject.toml: pin {dependency!r} with == so the portal can serve it")
    return name.strip(), version.strip()


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_hashes(name: str, version: str) -> set[str]:
    """The sha256s agents/requirements-dist.txt allows for `name==version` (its `--hash=sha256:`s)."""
    text = DEPENDENCY_PINS.read_text() if DEPENDENCY_PINS.exists() else ""
    for line in re.sub(r"\\\n", " ", text).splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        pin_name, _, pin_version = words[0].partition("==")
        if _normalized(pin_name) == _normalized(name) and pin_version == version:
            return {word.removeprefix("--hash=sha256:") for word in words[1:] if word.startswith("--hash=sha256:")}
    return set()


def _dependency_wheel(name: str, version: str, hashes: set[str]) -> Path | None:
    """The pinned wheel already in the folder; one with another sha256 is removed (and logged)."""
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    for found in sorted(p for p in dist_dir().glob("*.whl") if p.name.lower().startswith(stem)):
        digest = sha256_file(found)
        if digest in hashes:
            return found
        logger.warning(
            "agent distribution: %s in %s has sha256 %s, not one agents/requirements-dist.txt pins; removed, "
            "not served", found.name, found.parent, digest,
        )  # fmt: skip
        found.unlink(missing_ok=True)
    return None


def _dependency_fetch(name: str, version: str, hashes: set[str]) -> Path:
    """pip download the pinned wheel, its sha256 checked by pip (--require-hashes), into a scratch
    folder beside the served files, then rename it into place whole. Raises AgentDistError with
    pip's last words."""
    with tempfile.TemporaryDirectory(dir=dist_dir(), prefix=".download-") as scratch:
        requirement = Path(scratch) / "requirement.txt"
        requirement.write_text(f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in sorted(hashes)) + "\n")
        command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--require-hashes",
                   "-r", str(requirement), "--no-deps", "--only-binary=:all:", "--retries", "1", "--timeout", "15",
                   "-d", scratch]  # fmt: skip
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise AgentDistError("pip download took over 300 s") from None
        wheels = sorted(Path(scratch).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            last = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise AgentDistError(f"pip download failed: {last[-300:]}")
        if sha256_file(wheels[0]) not in hashes:  # pip checked it; a wheel of another name would not be
            raise AgentDistError(f"pip download gave {wheels[0].name}, whose sha256 is not the pinned one")
        target = dist_dir() / wheels[0].name
        os.replace(wheels[0], target)
        return target


def agent_dist_prepare() -> dict:
    """Bring AGENT_DIST_DIR up to date and return its manifest: the agent's wheel (written when the
    tree changed), each pinned dependency's wheel (fetched when absent) and `missing`, the
    dependencies that could not be fetched, each logged in one line. Safe when several processes
    or nodes start at once (a lock on the folder, every file renamed into place whole)."""
    project = agent_project()
    folder = dist_dir()
    with folder_lock(folder):
        target = folder / project.wheel_name
        data = agent_wheel_bytes(project)
        if not target.exists() or target.read_bytes() != data:
            write_atomic(target, data)
        files, missing = [target], []
        for dependency in project.dependencies:
            name, version = _pinned(dependency)
            hashes = dependency_hashes(name, version)
            wheel = _dependency_wheel(name, version, hashes)
            if wheel is None:
                try:
                    if not hashes:
                        raise AgentDistError(f"agents/requirements-dist.txt pins no sha256 for {name}=={version}")
                    wheel = _dependency_fetch(name, version, hashes)
                except AgentDistError as error:
                    missing.append(f"{name}=={version}")
                    logger.warning(
                        "agent distribution: the wheel of %s==%s is missing from %s (%s); GPU hosts cannot install "
                        "the agent from /agent/ until it is there (pip download --require-hashes --no-deps "
                        "-r agents/requirements-dist.txt -d %s)",
                        name, version, folder, error, folder,
                    )  # fmt: skip
                    continue
            files.append(wheel)
        manifest = {
            "version": project.version,
            "wheel": project.wheel_name,
            "files": [{"name": path.name, "sha256": sha256_file(path), "size": path.stat().st_size} for path in files],
            "missing": missing,
        }
        current = folder / MANIFEST
        encoded = json.dumps(manifest, indent=1).encode()
        if not current.exists() or current.read_bytes() != encoded:
            write_atomic(current, encoded)
    return manifest


def agent_dist_manifest() -> dict | None:
    """The manifest the last start wrote (None: no start prepared AGENT_DIST_DIR)."""
    try:
        return json.loads((Path(settings.AGENT_DIST_DIR) / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None


def agent_dist_file(name: str) -> Path | None:
    """A file the manifest names, in AGENT_DIST_DIR (None for any other name)."""
    manifest = agent_dist_manifest()
    if manifest is None or name not in {entry["name"] for entry in manifest["files"]}:
        return None
    return Path(settings.AGENT_DIST_DIR) / name
