"""A real single-node Slurm cluster for the scheduler tests, started once per session
(portal.demo.slurm: its own munge, slurm.conf, free ports and state under a temporary
directory, so a system Slurm is left alone) and torn down at the end."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from portal.demo import slurm
from tests.conftest import skip_or_fail


class Cluster(slurm.LocalCluster):
    """The cluster portal.demo.slurm started, with what the tests do to it."""

    def run(self, *args: str) -> str:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=True, env=self.env())
        return done.stdout

    def sbatch(self, *args: str) -> int:
        # The job's output goes under the cluster's directory, not the repository the tests run in.
        out = self.run("sbatch", "--parsable", f"--chdir={self.root}", f"--output={self.root}/job-%j.out", *args)
        return int(out.strip().split(";")[0])

    def scancel_all(self) -> None:
        subprocess.run(["scancel", "--full", "-w", self.node], env=self.env(), capture_output=True, check=False)

    def wait_running(self, job_id: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run("squeue", "-h", "-j", str(job_id), "-o", "%T").strip()
            if state == "RUNNING":
                return
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} did not start: {state!r}")

    def node_line(self) -> str:
        return self.run("scontrol", "-o", "show", "node", self.node)

    def reset_node(self) -> None:
        """Back to idle: no jobs, no drain (each test starts from a usable node)."""
        self.scancel_all()
        subprocess.run(
            ["scontrol", "update", f"NodeName={self.node}", "State=RESUME"],
            env=self.env(), capture_output=True, check=False,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.node_line()
            idle = "DRAIN" not in line and "NOT_RESPONDING" not in line and "State=IDLE" in line
            if self.run("squeue", "-h", "-w", self.node).strip() == "" and idle:
                return
            time.sleep(0.3)


@pytest.fixture(scope="session")
def slurm_cluster():
    missing = slurm.missing_commands()
    if missing:
        skip_or_fail(f"Slurm is not installed (missing {', '.join(missing)}; {slurm.INSTALL_HINT})")
    if os.geteuid() != 0:
        skip_or_fail("the Slurm test cluster needs root (slurmd runs as root)")
    local = slurm.start(Path(tempfile.mkdtemp(prefix="gpufleet-slurm-")))
    cluster = Cluster(**{field.name: getattr(local, field.name) for field in dataclasses.fields(local)})
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(local.conf)  # the portal's cli adapter runs sinfo/scontrol as children
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.stop()


@pytest.fixture(autouse=True)
def _no_node_answers_kept():
    """The portal keeps Slurm's answer about a node a few seconds; every test asks Slurm afresh."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def slurm_calls(tmp_path, settings):
    """SLURM_BIN_DIR of wrappers that log each Slurm command the portal runs (one line each: the
    command and its arguments) and then run the real one; returns the log's lines as a list."""
    import shutil

    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    log = tmp_path / "slurm-calls.log"
    log.touch()
    for command in ("sinfo", "squeue", "scontrol"):
        script = bin_dir / command
        script.write_text(f'#!/bin/sh\necho "{command} $*" >> {log}\nexec {shutil.which(command)} "$@"\n')
        script.chmod(0o755)
    settings.SLURM_BIN_DIR = str(bin_dir)
    return lambda: log.read_text().splitlines()


@pytest.fixture
def cluster(slurm_cluster):
    """The session's cluster with an idle, undrained node for this test."""
    slurm_cluster.reset_node()
    yield slurm_cluster
    slurm_cluster.scancel_all()
