"""The reading's `jobs` (ingest-v1.md): NVML's compute processes named through /proc, on a fake
/proc tree (cgroup v1 and v2, pods, unreadable environ, a pid gone), the stand-in NVML's process
list, the simulator, and the real /proc of processes this test starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from protocol_check import protocol_problems

from agents.collector import Collector
from agents.jobs import MAX_JOBS_PER_READING, RECHECK_S, JobNamer
from agents.simulate import SimulatedDeviceClient

SLURM_V1 = "12:memory:/slurm/uid_1000/job_4242/step_0/task_0\n11:cpuset:/slurm/uid_1000/job_4242/step_0\n"
SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n"
POD_CGROUPFS = "0::/kubepods/burstable/pod1c2d3e4f-0000-4000-8000-00000000abcd/3f1a9e\n"
POD_SYSTEMD = (
    "0::/kubepods.slice/kubepods-besteffort.slice/"
    "kubepods-besteffort-pod1c2d3e4f_1111_4000_8000_00000000abcd.slice/cri-containerd-9a.scope\n"
)
PLAIN = "0::/user.slice/user-1000.slice/session-3.scope\n"


class FakeProc:
    """A /proc tree: stat (with a command holding spaces and parentheses), cgroup, environ."""

    def __init__(self, root: Path):
        self.root = root

    def add(self, pid: int, *, cgroup: str = PLAIN, environ: dict | None = None, start: int = 1000,
            unreadable_environ: bool = False) -> Path:  # fmt: skip
        base = self.root / str(pid)
        base.mkdir(parents=True, exist_ok=True)
        fields = ["S", *["0"] * 18, str(start), "0"]
        (base / "stat").write_text(f"{pid} (python (train) x) {' '.join(fields)}\n")
        (base / "cgroup").write_text(cgroup)
        environ_path = base / "environ"
        if unreadable_environ:
            environ_path.mkdir()  # reading it fails, as another user's environ does
        else:
            environ_path.write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in (environ or {}).items()))
        return base


@pytest.fixture
def proc(tmp_path):
    return FakeProc(tmp_path / "proc")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def namer(proc: FakeProc, tmp_path: Path, logins: dict[int, str] | None = None, clock=None) -> JobNamer:
    logins = {os.getuid(): "alice"} if logins is None else logins
    return JobNamer(proc_root=proc.root, mapping_dir=tmp_path / "mapping", login_of=logins.get,
                    clock=clock or Clock())  # fmt: skip


def test_each_layout_names_its_job(proc, tmp_path):
    proc.add(10, cgroup=SLURM_V1)
    proc.add(11, cgroup=SLURM_V2)
    proc.add(12, cgroup=POD_CGROUPFS)
    proc.add(13, cgroup=POD_SYSTEMD)
    proc.add(14, cgroup=POD_CGROUPFS, environ={"POD_NAMESPACE": "vision", "POD_NAME": "trainer-0"})
    proc.add(15, environ={"SLURM_JOB_ID": "991", "HOME": "/home/bob"})
    proc.add(16, environ={"HOME": "/home/alice"})
    jobs = namer(proc, tmp_path).jobs({0: [10], 1: [11], 2: [12], 3: [13], 4: [14], 5: [15], 6: [16]})
    assert jobs == {
        0: ["slurm:4242"],
        1: ["slurm:77"],
        2: ["k8s:uid/1c2d3e4f-0000-4000-8000-00000000abcd"],
        3: ["k8s:uid/1c2d3e4f-1111-4000-8000-00000000abcd"],
        4: ["k8s:vision/trainer-0"],
        5: ["slurm:991"],
        6: ["user:alice"],
    }


def test_an_unreadable_process_counts_by_its_owner_and_a_vanished_one_is_skipped(proc, tmp_path):
    proc.add(20, unreadable_environ=True)
    proc.add(21, unreadable_environ=True)
    jobs = namer(proc, tmp_path, logins={}).jobs({0: [20, 404], 1: [404], 2: []})
    assert jobs == {0: [f"user:{os.getuid()}"], 1: [], 2: []}
    assert namer(proc, tmp_path).jobs({0: [21]}) == {0: ["user:alice"]}


def test_a_gpu_nvml_cannot_tell_stays_unknown_not_empty(proc, tmp_path):
    assert namer(proc, tmp_path).jobs({0: None, 1: []}) == {0: None, 1: []}


def test_a_known_process_is_not_read_again_but_a_reused_pid_is(proc, tmp_path):
    clock = Clock()
    jobs = namer(proc, tmp_path, clock=clock)
    base = proc.add(30, cgroup=SLURM_V1, start=5000)
    proc.add(31, cgroup=SLURM_V2)
    assert jobs.jobs({0: [30]}) == {0: ["slurm:4242"]}
    (base / "cgroup").write_text(SLURM_V2)  # the same process: its first answer stands
    (base / "environ").unlink()
    assert jobs.jobs({0: [30]}) == {0: ["slurm:4242"]}
    assert jobs.jobs({0: [30, 31]}) == {0: ["slurm:4242", "slurm:77"]}, "new processes are read at once"
    proc.add(30, cgroup=SLURM_V2, start=9000)  # the pid reused by a new process
    assert jobs.jobs({0: [30, 31]}) == {0: ["slurm:4242", "slurm:77"]}, "the same pids: /proc is not read"
    clock.now += RECHECK_S
    assert jobs.jobs({0: [30, 31]}) == {0: ["slurm:77"]}, "within a minute, /proc is read again"


def test_a_repeated_question_is_answered_alike_however_it_is_asked(proc, tmp_path):
    """The quick answer to the device client's repeated question (the same dict of pid lists) is
    the full answer's: a copy the caller may change, a changed order or a GPU more read again."""
    clock = Clock()
    jobs = namer(proc, tmp_path, clock=clock)
    proc.add(30, cgroup=SLURM_V1)
    proc.add(31, cgroup=SLURM_V2)
    first = jobs.jobs({0: [30, 31], 1: []})
    assert first == {0: ["slurm:4242", "slurm:77"], 1: []}
    first[0] = ["changed"]
    first[2] = None
    quick = jobs.jobs({0: [30, 31], 1: []})
    assert quick == {0: ["slurm:4242", "slurm:77"], 1: []}
    quick[1] = ["changed"]
    assert jobs.jobs({0: [30, 31], 1: []}) == {0: ["slurm:4242", "slurm:77"], 1: []}
    assert jobs.jobs({0: (30, 31), 1: ()}) == {0: ["slurm:4242", "slurm:77"], 1: []}, "tuples: the same answer"
    assert jobs.jobs({0: [30, 31]}) == {0: ["slurm:4242", "slurm:77"]}, "a GPU left out (lost this time)"
    proc.add(31, cgroup=SLURM_V1, start=7000)  # reused pid: only a full read would see it
    assert jobs.jobs({0: [31, 30], 1: []}) == {0: ["slurm:4242"], 1: []}, "another order is another question"
    assert jobs.jobs({0: [31, 30], 1: [], 2: None}) == {0: ["slurm:4242"], 1: [], 2: None}


def test_hpc_job_mapping_files_add_their_jobs_and_keys_are_capped(proc, tmp_path):
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    (mapping / "0").write_text("5151\n\nnot-a-job\n5152\n")
    for pid in range(100, 130):
        proc.add(pid, environ={"SLURM_JOB_ID": str(pid)})
    jobs = namer(proc, tmp_path).jobs({0: [], 1: list(range(100, 130))})
    assert jobs[0] == ["slurm:5151", "slurm:5152"]
    assert len(jobs[1]) == MAX_JOBS_PER_READING and jobs[1] == sorted(jobs[1])


def test_a_login_no_key_can_hold_falls_back_to_the_uid(proc, tmp_path):
    proc.add(40)
    assert namer(proc, tmp_path, logins={os.getuid(): "bad name"}).jobs({0: [40]}) == {0: [f"user:{os.getuid()}"]}


# --- NVML: the stand-in's process list through the real device client -------------------------


def test_the_readings_carry_the_jobs_of_nvmls_processes(fake_nvml, open_client, proc, tmp_path):
    gpus = fake_nvml.fake_reset(count=3)
    proc.add(501, cgroup=SLURM_V2)
    proc.add(502, environ={"HOME": "/"})
    gpus[0].processes = [501, 502]
    unsupported = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                   "nvmlDeviceGetComputeRunningProcesses")  # fmt: skip
    gpus[2].errors = dict.fromkeys(unsupported, fake_nvml.NVML_ERROR_NOT_SUPPORTED)
    readings = Collector(open_client(job_namer=namer(proc, tmp_path))).collect().readings
    assert [reading.get("jobs") for reading in readings] == [["slurm:77", "user:alice"], [], None]
    assert "jobs" not in readings[2], "a GPU whose processes cannot be told reads as an older agent's"
    assert protocol_problems({"batch_id": "x", "sent_at": readings[0]["ts"], "host": {"hostname": "h"},
                              "readings": readings}) == []  # fmt: skip


def test_an_older_driver_without_v3_falls_back_to_v2(fake_nvml, open_client, proc, tmp_path):
    gpus = fake_nvml.fake_reset(count=1)
    gpus[0].errors = {"nvmlDeviceGetComputeRunningProcesses_v3": fake_nvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    proc.add(601, cgroup=SLURM_V1)
    gpus[0].processes = [601]
    client = open_client(job_namer=namer(proc, tmp_path))
    assert Collector(client).collect().readings[0]["jobs"] == ["slurm:4242"]
    # The call that answered is remembered: v3 is not tried again (it would now fail otherwise).
    assert client._processes_call.__name__ == "nvmlDeviceGetComputeRunningProcesses_v2"
    gpus[0].errors["nvmlDeviceGetComputeRunningProcesses_v3"] = fake_nvml.NVML_ERROR_UNKNOWN
    assert Collector(client).collect().readings[0]["jobs"] == ["slurm:4242"]


def test_a_process_list_that_fails_later_costs_that_gpus_jobs_once_logged(fake_nvml, open_client, proc, tmp_path,
                                                                          caplog):  # fmt: skip
    gpus = fake_nvml.fake_reset(count=2)
    proc.add(701, cgroup=SLURM_V2)
    gpus[0].processes = gpus[1].processes = [701]
    collector = Collector(open_client(job_namer=namer(proc, tmp_path)))
    assert [r["jobs"] for r in collector.collect().readings] == [["slurm:77"], ["slurm:77"]]
    gpus[1].errors = {"nvmlDeviceGetComputeRunningProcesses_v3": fake_nvml.NVML_ERROR_UNKNOWN}
    for _ in range(3):
        readings = collector.collect().readings
        assert readings[0]["jobs"] == ["slurm:77"] and "jobs" not in readings[1]
    assert caplog.text.count("the readings carry no jobs") == 1
    gpus[1].errors = {}
    gpus[1].processes = []
    assert [r["jobs"] for r in collector.collect().readings] == [["slurm:77"], []]
    gpus[0].lost = True
    readings = collector.collect().readings
    assert [r["gpu_uuid"] for r in readings] == [gpus[1].uuid] and readings[0]["jobs"] == []


def test_a_process_the_namer_chokes_on_costs_the_jobs_not_the_reading(fake_nvml, open_client, caplog):
    class Broken(JobNamer):
        def jobs(self, pids_by_gpu):
            raise RuntimeError("proc is odd")

    fake_nvml.fake_reset(count=1)[0].processes = [1]
    readings = Collector(open_client(job_namer=Broken())).collect().readings
    assert len(readings) == 1 and "jobs" not in readings[0] and readings[0]["temperature_c"] == 64
    assert "naming the GPUs' jobs failed" in caplog.text


# --- the simulator and the real /proc ----------------------------------------------------------


def test_the_simulator_runs_named_jobs_and_idles_between_them():
    clock = [1_000_000.0]
    device = SimulatedDeviceClient(count=2, scenarios=["healthy"], hostname="sim-a", clock=lambda: clock[0],
                                   job_s=(60.0, 60.0), pause_s=(30.0, 30.0))  # fmt: skip
    seen = set()
    for step in range(0, 900, 5):
        clock[0] = 1_000_000.0 + step
        jobs = device.running_jobs([0, 1])
        for index, keys in jobs.items():
            assert len(keys) <= 1
            busy = device.metrics(index)["utilization_gpu_pct"] > 0
            assert bool(keys) == busy, (step, index, keys)
            seen.update(keys)
    assert any(key.startswith("slurm:") for key in seen) and any(key.startswith("user:") for key in seen)
    assert not {key for key in seen if key.startswith("user:")} - {"user:alice", "user:bob", "user:chen"}


def test_the_real_proc_names_processes_this_test_starts(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    in_job = subprocess.Popen(sleeper, env={**os.environ, "SLURM_JOB_ID": "31337"})
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    plain = subprocess.Popen(sleeper, env=plain_env)
    try:
        real = JobNamer(mapping_dir=tmp_path / "none")
        cgroup = Path(f"/proc/{plain.pid}/cgroup").read_text()
        if "/job_" in cgroup or "kubepods" in cgroup:
            pytest.skip(f"this test runs inside a scheduler's cgroup: {cgroup.strip()}")
        jobs = real.jobs({0: [in_job.pid], 1: [plain.pid]})
        import pwd

        assert jobs == {0: ["slurm:31337"], 1: [f"user:{pwd.getpwuid(os.getuid()).pw_name}"]}
    finally:
        in_job.kill()
        plain.kill()
        in_job.wait()
        plain.wait()
    assert real.jobs({1: [in_job.pid]}) == {1: []}, "a process that ended is skipped"
