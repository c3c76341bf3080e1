"""A throw-away single-node Slurm cluster on this machine, for the tests and the demo.

Its own munge key and socket, its own slurm.conf under `root` with free ports and its own state
directories, so a system Slurm (one the package install may have started) is left alone. The node
is this machine (`hostname -s`) with two GPUs (gres files, no devices). Needs root (slurmd) and
Debian's slurm-wlm, slurmrestd, slurm-wlm-jwt-plugin and munge; slurmrestd runs as `nobody` with
JWT authentication (it refuses root), the token being root's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import grp
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd")
CLIENTS = ("sinfo", "squeue", "scontrol", "sbatch", "scancel")
INSTALL_HINT = "apt-get install slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge (as root)"


@dataclasses.dataclass
class LocalCluster:
    root: Path
    conf: Path
    node: str
    rest_url: str
    rest_user: str
    rest_token: str
    _rest: subprocess.Popen | None = None

    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def stop(self, *, remove: bool = True) -> None:
        subprocess.run(["scancel", "--full", "-w", self.node], env=self.env(), capture_output=True, check=False)
        if self._rest is not None:
            self._rest.terminate()
            try:
                self._rest.wait(10)
            except subprocess.TimeoutExpired:
                self._rest.kill()
        stop_stale(self.root)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def stop_stale(root: Path) -> None:
    """Stop the daemons a cluster under `root` left running (a demo killed without its clean-up)."""
    for pidfile in ("slurmrestd.pid", "slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
        _kill_pidfile(root / pidfile)


def missing_commands() -> list[str]:
    return [name for name in DAEMONS + CLIENTS if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]


def _prepare_root(root: Path) -> tuple[Path, Path]:
    """The folders, the munge key, the JWT key and the two GPUs' device files under `root`;
    returns the munge key's and the JWT key's paths."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    for sub in ("munge", "ctld", "spool", "log"):
        (root / sub).mkdir(exist_ok=True)
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
    return key, jwt_key


def _write_conf(root: Path, *, node: str, ctld_port: int, d_port: int, sock: Path, jwt_key: Path) -> Path:
    """slurm.conf and gres.conf under `root`, world-readable; returns slurm.conf's path."""
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=gpufleetlocal
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
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""
    )
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File={root}/gpu[0-1]\n")
    for path in (conf, root / "gres.conf"):
        path.chmod(0o644)
    return conf


def _start_daemons(cluster: LocalCluster, env: dict, *, key: Path, sock: Path, others: str) -> None:
    """munged, slurmctld and slurmd, each waited for; the node idle at the end."""
    root, node = cluster.root, cluster.node
    subprocess.run(
        ["munged", "-f", f"--key-file={key}", f"--socket={sock}", f"--pid-file={root}/munge/munged.pid",
         f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    subprocess.run(["slurmctld"], env=env, check=True, capture_output=True, timeout=30)
    _wait(
        lambda: "UP" in subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True).stdout,
        30, "slurmctld", root / "log" / "slurmctld.log",
    )  # fmt: skip
    subprocess.run(["slurmd"], env=env, check=True, capture_output=True, timeout=30)

    def idle():
        line = subprocess.run(["scontrol", "-o", "show", "node", node], env=env, capture_output=True, text=True)
        return "State=IDLE " in line.stdout

    _wait(idle, 60, f"node {node} (other Slurm processes: {others or 'none'})", root / "log" / "slurmd.log")


def _start_rest(cluster: LocalCluster, env: dict, rest_port: int) -> None:
    """slurmrestd as nobody with JWT authentication, waited for; root's token on the cluster."""
    root = cluster.root
    with open(root / "log" / "slurmrestd.log", "wb") as log:
        cluster._rest = subprocess.Popen(  # noqa: S603
            ["slurmrestd", "-u", "nobody", "-g", _nobody_group(), "-a", "rest_auth/jwt", "-s", _openapi_plugins(),
             f"127.0.0.1:{rest_port}"],
            env={**env, "SLURM_JWT": "daemon"}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    (root / "slurmrestd.pid").write_text(str(cluster._rest.pid))
    _wait(
        lambda: socket.create_connection(("127.0.0.1", rest_port), timeout=1).close() or True,
        30, "slurmrestd", root / "log" / "slurmrestd.log",
    )  # fmt: skip
    token = subprocess.run(
        ["scontrol", "token", "username=root", "lifespan=86400"], env=env, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    cluster.rest_token = token.strip().partition("=")[2]


def start(root: Path, *, rest: bool = True) -> LocalCluster:
    """Start munged, slurmctld, slurmd and (with `rest`) slurmrestd under `root` (made
    world-readable: slurmrestd runs as nobody and reads slurm.conf, so every directory above must
    let nobody through); raises RuntimeError with the log's tail if one does not come up."""
    key, jwt_key = _prepare_root(root)
    node = socket.gethostname().split(".")[0]
    ctld_port, d_port, rest_port = _free_ports(3)
    sock = root / "munge" / "munge.socket"
    conf = _write_conf(root, node=node, ctld_port=ctld_port, d_port=d_port, sock=sock, jwt_key=jwt_key)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    others = subprocess.run(["pgrep", "-a", "slurm"], capture_output=True, text=True, check=False).stdout.strip()
    cluster = LocalCluster(root=root, conf=conf, node=node, rest_url=f"http://127.0.0.1:{rest_port}",
                           rest_user="root", rest_token="")  # fmt: skip
    try:
        _start_daemons(cluster, env, key=key, sock=sock, others=others)
        if rest:
            _start_rest(cluster, env, rest_port)
    except BaseException:
        cluster.stop(remove=False)
        raise
    return cluster


def _openapi_plugins() -> str:
    """22.05 serves versioned plugins (the newest it has: v0.0.38 in Debian 12; the dbv0.0.* ones
    need slurmdbd); later releases name them openapi/slurmctld."""
    found = glob.glob("/usr/lib/*/slurm-wlm/openapi_v0_0_*.so") + glob.glob("/usr/lib*/slurm/openapi_v0_0_*.so")
    versions = sorted({int(m.group(1)) for f in found if (m := re.search(r"openapi_v0_0_(\d+)\.so$", f))})
    return f"openapi/v0.0.{versions[-1]}" if versions else "openapi/slurmctld"


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


def _wait(predicate, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001, S110 - not up yet
            pass
        time.sleep(0.3)
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
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


def _nobody_group() -> str:
    for name in ("nogroup", "nobody"):
        try:
            grp.getgrnam(name)
            return name
        except KeyError:
            continue
    return "65534"
