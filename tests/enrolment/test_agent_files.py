"""/agent/: the agent's wheel built from the tree, its dependency's, install.sh and the version,
for anyone (a new host has no account)."""

import io
import zipfile

import pytest
from django.test import Client

from agents import __version__

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def dist_dir(settings, tmp_path):
    settings.AGENT_DIST_DIR = str(tmp_path)
    return tmp_path


def test_version_and_index_for_pip(dist_dir):
    (dist_dir / "nvidia_ml_py-13.615.71-py3-none-any.whl").write_bytes(b"PK")
    version = Client().get("/agent/version").json()
    assert version == {"version": __version__, "wheel": f"gpu_fleet_agent-{__version__}-py3-none-any.whl"}
    index = Client().get("/agent/").content.decode()
    assert f'href="{version["wheel"]}"' in index and 'href="nvidia_ml_py-13.615.71-py3-none-any.whl"' in index


def test_the_wheel_is_built_from_the_tree_with_its_entry_point_and_dependency():
    response = Client().get(f"/agent/gpu_fleet_agent-{__version__}-py3-none-any.whl")
    assert response.status_code == 200
    wheel = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    names = wheel.namelist()
    assert "agents/cli.py" in names and "agents/__main__.py" in names
    dist_info = f"gpu_fleet_agent-{__version__}.dist-info"
    metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert "Name: gpu-fleet-agent" in metadata and "Requires-Dist: nvidia-ml-py==" in metadata
    assert "gpu-fleet-agent = agents.cli:main" in wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert f"{dist_info}/RECORD" in names


def test_install_sh_is_served_and_unknown_files_are_404():
    script = Client().get("/agent/install.sh")
    assert script.status_code == 200 and script.content.startswith(b"#!/bin/sh")
    assert Client().get("/agent/../settings.py").status_code == 404
    assert Client().get("/agent/nothing.whl").status_code == 404
    assert Client().post("/agent/install.sh").status_code == 405
