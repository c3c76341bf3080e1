"""A real single-node Slurm cluster for the scheduler tests, started once per session.

Its own munge key and socket, its own slurm.conf under a temporary directory (own ports, own state
directories), so nothing touches a system Slurm that the package install may have started. The
node is this machine (`hostname -s`) with two GPUs (gres files under the temporary directory).
slurmrestd runs as `nobody` (it refuses root) with JWT authentication.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd")
CLIENTS = ("sinfo", "squeue", "scontrol", "sbatch", "scancel")


@dataclasses.dataclass
class Cluster:
    root: Path
    conf: Path
    node: str
    rest_url: str
    rest_user: str
    rest_token: str

    def run(self, *args: str) -> str:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=True, env=self.env())
        return done.stdout

    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def sbatch(self, *args: str) -> int:
        out = self.run("sbatch", "--parsable", *args)
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


def _free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _wait(predicate, timeout: float, what: str, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.3)
    tail = log.read_text()[-2000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not come up within {timeout:g} s\n{tail}")


def _kill_pidfile(path: Path) -> None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)


@pytest.fixture(scope="session")
def slurm_cluster():
    missing = [
        name for name in DAEMONS + CLIENTS if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()
    ]
    if missing:
        skip_or_fail(f"Slurm is not installed (missing {', '.join(missing)}; apt-get install slurm-wlm slurmrestd "
                     "slurm-wlm-jwt-plugin munge)")  # fmt: skip
    if os.geteuid() != 0:
        skip_or_fail("the Slurm test cluster needs root (slurmd runs as root)")

    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-"))
    root.chmod(0o755)  # slurmrestd runs as nobody and reads slurm.conf
    for sub in ("munge", "ctld", "spool", "log"):
        (root / sub).mkdir()
    (root / "munge").chmod(0o700)
    (root / "log").chmod(0o777)
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    jwt_key = root / "ctld" / "jwt.key"
    jwt_key.write_bytes(secrets.token_bytes(32))
    jwt_key.chmod(0o600)
    for index in range(2):
        (root / f"gpu{index}").touch()
    node = socket.gethostname().split(".")[0]
    ctld_port, d_port, rest_port = _free_ports(3)
    sock = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=gpufleettest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={jwt_key}
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory=500 Gres=gpu:2 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""
    )
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File={root}/gpu[0-1]\n")
    for path in (conf, root / "gres.conf"):
        path.chmod(0o644)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    rest = None
    others = subprocess.run(["pgrep", "-a", "slurm"], capture_output=True, text=True, check=False).stdout
    try:
        subprocess.run(
            ["munged", "-f", f"--key-file={key}", f"--socket={sock}", f"--pid-file={root}/munge/munged.pid",
             f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        subprocess.run(["slurmctld"], env=env, check=True, capture_output=True, timeout=30)
        _wait(lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True).stdout.count("UP"),
              30, "slurmctld", root / "log" / "slurmctld.log")  # fmt: skip
        subprocess.run(["slurmd"], env=env, check=True, capture_output=True, timeout=30)

        def idle():
            line = subprocess.run(["scontrol", "-o", "show", "node", node], env=env, capture_output=True, text=True)
            return "State=IDLE " in line.stdout

        _wait(idle, 60, f"node {node} (other Slurm processes: {others.strip() or 'none'})", root / "log" / "slurmd.log")
        rest = subprocess.Popen(  # noqa: S603
            ["slurmrestd", "-u", "nobody", "-g", _nobody_group(), "-a", "rest_auth/jwt", "-s", "openapi/v0.0.38",
             f"127.0.0.1:{rest_port}"],
            env={**env, "SLURM_JWT": "daemon"}, stdout=open(root / "log" / "slurmrestd.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        _wait(lambda: socket.create_connection(("127.0.0.1", rest_port), timeout=1).close() or True, 30,
              "slurmrestd", root / "log" / "slurmrestd.log")  # fmt: skip
        token = (
            subprocess.run(
                ["scontrol", "token", "username=root", "lifespan=7200"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .partition("=")[2]
        )
        previous = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(conf)  # the portal's cli adapter runs sinfo/scontrol as children
        try:
            yield Cluster(root=root, conf=conf, node=node, rest_url=f"http://127.0.0.1:{rest_port}",
                          rest_user="root", rest_token=token)  # fmt: skip
        finally:
            if previous is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = previous
    finally:
        subprocess.run(["scancel", "--full", "-w", node], env=env, capture_output=True, check=False)
        if rest is not None:
            rest.terminate()
            try:
                rest.wait(10)
            except subprocess.TimeoutExpired:
                rest.kill()
        _kill_pidfile(root / "slurmd.pid")
        _kill_pidfile(root / "slurmctld.pid")
        _kill_pidfile(root / "munge" / "munged.pid")
        shutil.rmtree(root, ignore_errors=True)


def _nobody_group() -> str:
    import grp

    for name in ("nogroup", "nobody"):
        try:
            grp.getgrnam(name)
            return name
        except KeyError:
            continue
    return "65534"


@pytest.fixture
def cluster(slurm_cluster):
    """The session's cluster with an idle, undrained node for this test."""
    slurm_cluster.reset_node()
    yield slurm_cluster
    slurm_cluster.scancel_all()
