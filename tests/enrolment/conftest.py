import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail


@pytest.fixture(autouse=True)
def _agent_dist_dir(settings, tmp_path):
    """Each test's own AGENT_DIST_DIR (empty: no start prepared it), never the checkout's var/."""
    settings.AGENT_DIST_DIR = str(tmp_path / "agent-dist")


STAND_IN = b"PK stand-in"


@pytest.fixture
def stand_in_pinned(monkeypatch, tmp_path):
    """A stand-in for the dependency's wheel (tests about serving, not about pip), pinned by its
    own sha256 as agents/requirements-dist.txt pins the real one."""
    from portal.enrolment import agent_dist

    pins = tmp_path / "requirements-dist.txt"
    pins.write_text(f"nvidia-ml-py==13.615.71 --hash=sha256:{hashlib.sha256(STAND_IN).hexdigest()}\n")
    monkeypatch.setattr(agent_dist, "DEPENDENCY_PINS", pins)
    return STAND_IN


@pytest.fixture(scope="session")
def nvml_wheel(tmp_path_factory) -> Path:
    """The real wheel agents/requirements-dist.txt pins, as a start fetches it (pip's cache, else its index)."""
    folder = tmp_path_factory.mktemp("nvml-wheel")
    pins = Path(__file__).resolve().parents[2] / "agents" / "requirements-dist.txt"
    command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--require-hashes",
               "--no-deps", "--only-binary=:all:", "-r", str(pins), "-d", str(folder)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    wheels = sorted(folder.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        skip_or_fail(f"the agent's dependency wheel could not be fetched: {result.stderr[-500:]}")
    return wheels[0]
