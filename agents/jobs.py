"""Names the jobs behind a GPU's compute processes (ingest-v1.md, the reading's `jobs`).

NVML tells which process ids hold a GPU; the host's `/proc` tells whose they are:
- `/proc/<pid>/cgroup`: Slurm puts a job's processes in a cgroup whose path names `job_<id>`
  (cgroup v1 `.../slurm/uid_1000/job_42/step_0`, v2 `.../system.slice/slurmstepd.scope/job_42/...`);
  Kubernetes in `.../kubepods/.../pod<uid>/<container>` (`-` and `_` spellings of the uid);
- `/proc/<pid>/environ`: `SLURM_JOB_ID` (a job started without Slurm's cgroup plugin), and for a
  pod `POD_NAMESPACE`/`POD_NAME` where the lab's manifests set them (the downward API);
- else the process's owner: `user:<login>`, or `user:<uid>` when no login resolves. A process the
  agent may not read (another user's `environ`) counts by its owner, never as no job.
A process gone between NVML's answer and `/proc` is skipped. Where the lab's Slurm prolog writes
dcgm-exporter's HPC job mapping files (`<dir>/<GPU index>`, a job id a line), those count too.

A pid's answer is cached under (pid, start time from `/proc/<pid>/stat`): pids are reused. A GPU
whose process ids are the ones of the previous collection keeps its answer without touching
`/proc` for up to `RECHECK_S` (a pid freed and taken again by another job on the same GPU within
one interval is not a case worth a read per process per second), so a busy host pays for naming
only when its work changes.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

log = logging.getLogger(__name__)

MAX_JOBS_PER_READING = 16
DEFAULT_HPC_JOB_MAPPING_DIR = "/var/lib/dcgm-exporter/job-mapping"
RECHECK_S = 60.0

_SLURM_CGROUP = re.compile(r"/job_(\d+)(?=/|$)", re.MULTILINE)
_POD_UID = r"[0-9a-fA-F]{8}(?:[-_][0-9a-fA-F]{4}){3}[-_][0-9a-fA-F]{12}"
_POD_CGROUP = re.compile(rf"kubepods.*?[-/]pod({_POD_UID})")
_JOB_ID = re.compile(r"\d{1,20}")
# The protocol's job key: 1-128 printable ASCII characters, no spaces.
_VALID_KEY = re.compile(r"[!-~]{1,128}")


def valid_key(key: str) -> bool:
    return _VALID_KEY.fullmatch(key) is not None


class JobNamer:
    """Job keys for process ids, read from a `/proc` tree (the host's, or a test's)."""

    def __init__(
        self,
        *,
        proc_root: str | os.PathLike = "/proc",
        mapping_dir: str | os.PathLike | None = None,
        login_of: Callable[[int], str | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._proc = Path(proc_root)
        self._mapping_dir = Path(
            mapping_dir or os.environ.get("DCGM_HPC_JOB_MAPPING_DIR") or DEFAULT_HPC_JOB_MAPPING_DIR
        )
        self._login_of = login_of or _login
        self._clock = clock
        self._cache: dict[tuple[int, str], str] = {}
        # The last full answer: the pids it was for, its keys, and when /proc was last read.
        self._checked_at = float("-inf")
        self._last: dict[int, tuple[tuple[int, ...] | None, list[str] | None]] = {}
        self._asked: dict[int, list[int] | None] = {}
        self._answer: dict[int, list[str] | None] = {}
        self._mapping_seen = False

    def jobs(self, pids_by_gpu: dict[int, Iterable[int] | None]) -> dict[int, list[str] | None]:
        """GPU index -> its job keys (sorted, at most 16), None where NVML could not tell. The
        lists are shared with the next answers while the processes stay: read them, never change
        them."""
        now = self._clock()
        fresh = now - self._checked_at < RECHECK_S
        if fresh and pids_by_gpu == self._asked:  # every GPU as last time, pids in the same order
            return dict(self._answer)
        asked = {index: None if pids is None else tuple(pids) for index, pids in pids_by_gpu.items()}
        if fresh and all(index in self._last and self._last[index][0] == pids for index, pids in asked.items()):
            return {index: self._last[index][1] for index in asked}
        self._checked_at = now
        self._mapping_seen = self._mapping_dir.is_dir()
        seen: set[tuple[int, str]] = set()
        answer: dict[int, list[str] | None] = {}
        for index, pids in asked.items():
            answer[index] = None if pids is None else self._keys(index, pids, seen)
        # Forget processes that ended: the cache holds only what runs now.
        for gone in self._cache.keys() - seen:
            del self._cache[gone]
        self._last = {index: (asked[index], keys) for index, keys in answer.items()}
        # The question, for the next one's quick comparison with what the device client asks (a
        # dict of pid lists); a caller asking with tuples takes the per-GPU comparison above.
        self._asked = {index: None if pids is None else list(pids) for index, pids in asked.items()}
        self._answer = answer
        return dict(answer)

    def _keys(self, index: int, pids: tuple[int, ...], seen: set[tuple[int, str]]) -> list[str]:
        keys = set(self._mapped_jobs(index)) if self._mapping_seen else set()
        for pid in pids:
            key = self._job_of(pid, seen)
            if key is not None:
                keys.add(key)
        return sorted(keys)[:MAX_JOBS_PER_READING]

    def _job_of(self, pid: int, seen: set[tuple[int, str]]) -> str | None:
        started = self._start_time(pid)
        if started is None:
            return None  # gone between NVML's answer and now
        cache_key = (pid, started)
        seen.add(cache_key)
        key = self._cache.get(cache_key)
        if key is None:
            key = self._read_job(pid)
            if key is None:
                return None
            self._cache[cache_key] = key
        return key

    def _start_time(self, pid: int) -> str | None:
        try:
            stat = (self._proc / str(pid) / "stat").read_bytes()
        except OSError:
            return None
        # Field 22 (starttime) counts after the command, which may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        return fields[19].decode() if len(fields) > 19 else None

    def _read_job(self, pid: int) -> str | None:
        base = self._proc / str(pid)
        try:
            cgroup = (base / "cgroup").read_text(errors="replace")
        except FileNotFoundError:
            return None
        except OSError:
            cgroup = ""
        found = _SLURM_CGROUP.search(cgroup)
        if found:
            return f"slurm:{found.group(1)}"
        environ = self._environ(base)
        pod = _POD_CGROUP.search(cgroup)
        if pod:
            namespace, name = environ.get("POD_NAMESPACE", ""), environ.get("POD_NAME", "")
            key = f"k8s:{namespace}/{name}" if namespace and name else f"k8s:uid/{pod.group(1).replace('_', '-')}"
            if valid_key(key):
                return key
        job_id = environ.get("SLURM_JOB_ID", "")
        if _JOB_ID.fullmatch(job_id):
            return f"slurm:{job_id}"
        return self._owner(base)

    @staticmethod
    def _environ(base: Path) -> dict[str, str]:
        try:
            raw = (base / "environ").read_bytes()
        except OSError:
            return {}  # another user's process: counted by its owner
        pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if entry)
        return {name.decode(errors="replace"): value.decode(errors="replace") for name, _, value in pairs}

    def _owner(self, base: Path) -> str | None:
        try:
            uid = base.stat().st_uid
        except OSError:
            return None
        login = self._login_of(uid)
        key = f"user:{login}" if login else ""
        return key if valid_key(key) else f"user:{uid}"

    def _mapped_jobs(self, index: int) -> list[str]:
        try:
            text = (self._mapping_dir / str(index)).read_text(errors="replace")
        except OSError:
            return []
        return [f"slurm:{line.strip()}" for line in text.splitlines() if _JOB_ID.fullmatch(line.strip())]


def _login(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None
