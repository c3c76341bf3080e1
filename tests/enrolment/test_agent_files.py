"""/agent/: the agent's wheel built from the tree, its dependency's, install.sh and the version,
for anyone (a new host has no account). A start prepares the files (agent_dist_prepare); a
request only serves them."""

import hashlib
import io
import json
import logging
import os
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.test import Client

from agents import __version__
from portal.enrolment import agent_dist
from portal.enrolment.agent_dist import agent_dist_prepare

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
AGENT_WHEEL = f"gpu_fleet_agent-{__version__}-py3-none-any.whl"
NVML_WHEEL = "nvidia_ml_py-13.615.71-py3-none-any.whl"
NVML_PIN = "nvidia-ml-py==13.615.71"


@pytest.fixture(autouse=True)
def dist_dir(settings, tmp_path):
    settings.AGENT_DIST_DIR = str(tmp_path / "agent-dist")
    return tmp_path / "agent-dist"


@pytest.fixture
def prepared(dist_dir, stand_in_pinned):
    """The distribution as a start leaves it, the dependency's wheel already there (a stand-in:
    these tests are about serving, not about pip)."""
    dist_dir.mkdir()
    (dist_dir / NVML_WHEEL).write_bytes(stand_in_pinned)
    return agent_dist_prepare()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_version_and_index_for_pip(prepared, dist_dir):
    version = Client().get("/agent/version").json()
    agent_sha = sha256((dist_dir / AGENT_WHEEL).read_bytes())
    assert {key: version[key] for key in ("version", "wheel")} == {"version": __version__, "wheel": AGENT_WHEEL}
    assert version["sha256"] == agent_sha and version["missing"] == []
    assert version["files"] == {AGENT_WHEEL: agent_sha, NVML_WHEEL: sha256(b"PK stand-in")}
    index = Client().get("/agent/")
    assert index.status_code == 200
    page = index.content.decode()
    assert f'href="{AGENT_WHEEL}"' in page and f'href="{NVML_WHEEL}"' in page and "Missing" not in page


def test_the_wheel_is_built_from_the_tree_with_its_entry_point_and_dependency(prepared):
    response = Client().get(f"/agent/{AGENT_WHEEL}")
    assert response.status_code == 200
    wheel = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    names = wheel.namelist()
    assert "agents/cli.py" in names and "agents/__main__.py" in names
    dist_info = f"gpu_fleet_agent-{__version__}.dist-info"
    metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert "Name: gpu-fleet-agent" in metadata and "Requires-Dist: nvidia-ml-py==" in metadata
    assert "gpu-fleet-agent = agents.cli:main" in wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert f"{dist_info}/RECORD" in names


def test_install_sh_is_served_and_unknown_files_are_404(prepared, dist_dir):
    script = Client().get("/agent/install.sh")
    assert script.status_code == 200 and script.content.startswith(b"#!/bin/sh")
    assert Client().get("/agent/../settings.py").status_code == 404
    assert Client().get("/agent/nothing.whl").status_code == 404
    assert Client().get("/agent/manifest.json").status_code == 404  # only the wheels the manifest names
    (dist_dir / "stray-1.0-py3-none-any.whl").write_bytes(b"PK")
    assert Client().get("/agent/stray-1.0-py3-none-any.whl").status_code == 404
    assert Client().post("/agent/install.sh").status_code == 405
    assert Client().post(f"/agent/{AGENT_WHEEL}").status_code == 405


def test_a_request_never_builds_the_wheel(prepared, dist_dir, monkeypatch):
    """A GET serves what the start prepared and never builds the agent's wheel: built per request
    through one shared temporary file, concurrent downloads could get a truncated wheel or a 500."""
    served_before = (dist_dir / AGENT_WHEEL).stat()

    def no_building(*args, **kwargs):
        raise AssertionError("a request built the agent's wheel")

    monkeypatch.setattr(agent_dist, "agent_wheel_bytes", no_building)
    monkeypatch.setattr(agent_dist, "agent_wheel_build", no_building, raising=False)
    for path in ("/agent/", "/agent/version", f"/agent/{AGENT_WHEEL}", f"/agent/{NVML_WHEEL}"):
        assert Client().get(path).status_code == 200, path
    after = (dist_dir / AGENT_WHEEL).stat()
    assert (after.st_ino, after.st_mtime_ns) == (served_before.st_ino, served_before.st_mtime_ns)


def test_concurrent_downloads_get_the_whole_wheel(prepared, dist_dir):
    expected = prepared["files"][0]["sha256"]

    def download(_):
        response = Client().get(f"/agent/{AGENT_WHEEL}")
        return response.status_code, sha256(b"".join(response.streaming_content))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(download, range(32)))
    assert results == [(200, expected)] * 32


def test_before_any_start_agent_says_it_is_not_prepared(dist_dir):
    index = Client().get("/agent/")
    assert index.status_code == 200 and b"has not been prepared" in index.content and b".whl" not in index.content
    assert Client().get(f"/agent/{AGENT_WHEEL}").status_code == 404
    version = Client().get("/agent/version").json()
    assert version["version"] == __version__ and version["wheel"] == AGENT_WHEEL and version["sha256"] is None


def test_a_start_without_the_dependency_logs_one_line_and_agent_says_so(dist_dir, monkeypatch, caplog, admin_client):
    """No network and nothing in pip's cache: the start goes on, logs one line naming the wheel,
    and /agent/ and the Add hosts page say what is missing."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip offline: no index, no find-links
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with caplog.at_level(logging.WARNING, logger="portal.start"):
        manifest = agent_dist_prepare()
    assert manifest["missing"] == [NVML_PIN]
    lines = [record.getMessage() for record in caplog.records if record.name == "portal.start"]
    assert len(lines) == 1 and NVML_PIN in lines[0] and str(dist_dir) in lines[0]
    page = Client().get("/agent/").content.decode()
    assert f"Missing: {NVML_PIN}" in page and f'href="{AGENT_WHEEL}"' in page
    assert Client().get("/agent/version").json()["missing"] == [NVML_PIN]
    add_hosts = admin_client.get("/add-hosts/").content.decode()
    assert 'id="agent-dist-missing"' in add_hosts and NVML_PIN in add_hosts


def test_the_add_hosts_page_warns_nothing_when_complete(prepared, admin_client):
    assert 'id="agent-dist-missing"' not in admin_client.get("/add-hosts/").content.decode()


def test_prepare_writes_again_only_what_changed(prepared, dist_dir):
    before = {path.name: path.stat().st_ino for path in dist_dir.iterdir()}
    assert agent_dist_prepare() == prepared
    assert {path.name: path.stat().st_ino for path in dist_dir.iterdir()} == before
    (dist_dir / AGENT_WHEEL).write_bytes(b"truncated")  # a damaged copy is replaced whole
    again = agent_dist_prepare()
    assert again == prepared
    assert sha256((dist_dir / AGENT_WHEEL).read_bytes()) == prepared["files"][0]["sha256"]


def test_several_starts_at_once_prepare_one_consistent_distribution(dist_dir, nvml_wheel):
    """Web processes (or nodes sharing VAR_DIR) starting together: each prepares under the
    folder's lock, and every file is renamed into place whole."""
    dist_dir.mkdir()
    (dist_dir / NVML_WHEEL).write_bytes(nvml_wheel.read_bytes())
    env = {**os.environ, "AGENT_DIST_DIR": str(dist_dir), "DEBUG": "true", "DJANGO_SETTINGS_MODULE": "portal.settings",
           "VAR_DIR": str(dist_dir.parent)}  # fmt: skip
    command = [sys.executable, "manage.py", "agent_dist"]
    starts = [subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for _ in range(3)]  # fmt: skip
    outputs = [start.communicate(timeout=120) for start in starts]
    assert [start.returncode for start in starts] == [0, 0, 0], outputs
    manifest = json.loads((dist_dir / "manifest.json").read_text())
    for entry in manifest["files"]:
        assert sha256((dist_dir / entry["name"]).read_bytes()) == entry["sha256"]
    assert sorted(p.name for p in dist_dir.iterdir() if not p.name.startswith(".")) == sorted(
        [AGENT_WHEEL, NVML_WHEEL, "manifest.json"]
    )


def test_the_dependency_is_served_only_with_the_pinned_sha256(dist_dir, nvml_wheel, monkeypatch, caplog, tmp_path):
    """A wheel whose sha256 is not the one agents/requirements-dist.txt pins (another build, a file
    swapped in the folder, an index that served something else) is neither served nor certified
    by the manifest: it is removed, logged, and pip, asked for the pinned hash, refuses it too."""
    pinned = (REPO / "agents/requirements-dist.txt").read_text()
    assert f"--hash=sha256:{sha256(nvml_wheel.read_bytes())}" in pinned
    wrong = tmp_path / "requirements-dist.txt"
    wrong.write_text(pinned.replace(sha256(nvml_wheel.read_bytes()), "0" * 64))
    monkeypatch.setattr(agent_dist, "DEPENDENCY_PINS", wrong)
    dist_dir.mkdir()
    (dist_dir / NVML_WHEEL).write_bytes(nvml_wheel.read_bytes())
    monkeypatch.setenv("PIP_FIND_LINKS", str(nvml_wheel.parent))  # pip finds the same wheel at once

    with caplog.at_level(logging.WARNING, logger="portal.start"):
        manifest = agent_dist_prepare()
    assert manifest["missing"] == [NVML_PIN] and [entry["name"] for entry in manifest["files"]] == [AGENT_WHEEL]
    assert not (dist_dir / NVML_WHEEL).exists()
    assert Client().get(f"/agent/{NVML_WHEEL}").status_code == 404
    lines = [record.getMessage() for record in caplog.records if record.name == "portal.start"]
    assert f"{NVML_WHEEL} in {dist_dir} has sha256 {sha256(nvml_wheel.read_bytes())}" in lines[0]
    assert NVML_PIN in lines[1] and "pip download failed" in lines[1]


def test_the_pinned_wheel_is_served_and_certified(dist_dir, nvml_wheel):
    dist_dir.mkdir()
    (dist_dir / NVML_WHEEL).write_bytes(nvml_wheel.read_bytes())
    manifest = agent_dist_prepare()
    assert manifest["missing"] == []
    assert {entry["name"]: entry["sha256"] for entry in manifest["files"]}[NVML_WHEEL] == sha256(
        nvml_wheel.read_bytes()
    )


def test_a_stand_in_that_is_not_the_pinned_wheel_is_not_served(dist_dir, monkeypatch):
    dist_dir.mkdir()
    (dist_dir / NVML_WHEEL).write_bytes(b"PK not the wheel the lab chose")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    assert agent_dist_prepare()["missing"] == [NVML_PIN]
    assert Client().get(f"/agent/{NVML_WHEEL}").status_code == 404
