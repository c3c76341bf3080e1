"""Commands from the portal (ingest-v1 "Commands"): the agent takes `diagnose` from the answer to
its batches, runs one at a time beside its collection, reports started then the result, and
loses no report (a stand-in portal on 127.0.0.1, tests/agents/portal_stub.py)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from portal_stub import PortalStub
from protocol_check import diagnostic_result_problems

from agents.agent import Agent
from agents.collector import Collector
from agents.commands import Diagnostics, DiagnosticStore, parse_commands
from agents.diagnose import Runner, XidLog
from agents.push import Backoff, Deliverer, Sender
from agents.simulate import SimulatedDeviceClient, gpu_uuid
from agents.spool import Spool

REPO = Path(__file__).resolve().parents[2]
HOST = "sim-commands"


@pytest.fixture
def stub():
    portal = PortalStub()
    yield portal
    portal.stop()


def command(level: int = 1, gpus: list[str] | None = None, **extra) -> dict:
    gpus = [gpu_uuid(HOST, 0)] if gpus is None else gpus
    item = {"id": str(uuid.uuid4()), "kind": "diagnose", "level": level, "gpus": gpus}
    item.update(extra)
    return item


def fake_dcgmi(directory: Path, sleep: float) -> Path:
    """A dcgmi that takes `sleep` seconds and prints a passing DCGM 4 document."""
    directory.mkdir(exist_ok=True)
    fake = directory / "dcgmi"
    fake.write_text(
        f"#!{sys.executable}\nimport sys, time\ntime.sleep({sleep})\n"
        f"sys.stdout.write(open({str(REPO / 'tests/agents/fixtures/dcgm/dcgm4_pass.json')!r}).read())\n"
    )
    fake.chmod(0o755)
    return fake


def wait_for(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


class Host:
    """A whole agent: collector, spool, sender thread and diagnostics threads, against `url`."""

    def __init__(self, directory: Path, url: str, *, scenarios=("healthy",), dcgmi: str | None = None) -> None:
        self.stop = threading.Event()
        self.device = SimulatedDeviceClient(count=2, scenarios=list(scenarios), hostname=HOST)
        self.collector = Collector(self.device)
        self.spool = Spool(directory)
        self.store = DiagnosticStore(directory)
        self.agent = Agent(collector=self.collector, hostname=HOST, spool=self.spool, batch_interval_s=0)
        self.sender = Sender(url=url, token="tok", timeout_s=1.0)
        xids = XidLog(self.store)
        self.collector.on_xid = xids.add
        runner = Runner(device=self.device, dcgmi=dcgmi, xids=xids, known_uuids=self.collector.known_uuids)
        self.diagnostics = Diagnostics(
            runner=runner,
            store=self.store,
            sender=self.sender,
            backoff=Backoff(initial_s=0.05, max_s=0.2),
            hold_backoff=Backoff(initial_s=0.05, max_s=0.2),
            idle_wait_s=0.05,
        )
        self.deliverer = Deliverer(
            spool=self.spool,
            sender=self.sender,
            backoff=Backoff(initial_s=0.05, max_s=0.2),
            on_answer=self.diagnostics.offer_answer,
            idle_wait_s=0.05,
        )
        self.threads = [threading.Thread(target=self.deliverer.run, args=(self.stop,), daemon=True)]
        self.threads.append(threading.Thread(target=self.collect, daemon=True))

    def collect(self) -> None:
        while not self.stop.is_set():
            if self.agent.collect():
                self.deliverer.wake.set()
            self.stop.wait(0.05)

    def __enter__(self) -> Host:
        for thread in self.threads:
            thread.start()
        self.diagnostics.start(self.stop)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)
        self.diagnostics.join(timeout=5)
        self.store.close()
        self.spool.close()


# --- what a command is ----------------------------------------------------------------------------


def test_only_well_formed_diagnose_commands_are_taken(caplog):
    good = command(level=2)
    answer = {
        "accepted": 1,
        "commands": [
            good,
            {"id": str(uuid.uuid4()), "kind": "shell", "cmd": "rm -rf /"},
            {"id": "not-a-uuid", "kind": "diagnose", "level": 1},
            command(level=0),
            command(level=4),
            command(level="1"),
            command(level=True),
            command(gpus="GPU-a"),
            command(gpus=[1, 2]),
            "diagnose",
        ],
    }
    with caplog.at_level(logging.INFO, logger="agents.commands"):
        commands = parse_commands(json.dumps(answer))
    assert [(c.id, c.level, c.gpus) for c in commands] == [(good["id"], 2, good["gpus"])]
    assert "kind 'shell'" in caplog.text
    assert parse_commands('{"accepted": 1}') == []
    assert parse_commands('{"commands": {"id": 1}}') == []
    assert parse_commands("<html>") == []
    assert parse_commands(json.dumps({"commands": [command(gpus=[])]}))[0].gpus is None  # every GPU


# --- end to end -------------------------------------------------------------------------------------


def test_a_command_in_the_answer_is_run_reported_started_then_its_result(stub, tmp_path):
    item = command(level=1, gpus=[gpu_uuid(HOST, 0), gpu_uuid(HOST, 1)])
    stub.commands.append(item)
    with Host(tmp_path, stub.url) as host:
        wait_for(lambda: item["id"] in stub.results())
        wait_for(lambda: len(stub.stored) >= 5)  # collection went on
        assert host.diagnostics.finished == 1
    reports = [body for i, body in stub.diag_reports if i == item["id"]]
    assert list(reports[0]) == ["started_at"]  # said at once
    result = reports[1]
    assert diagnostic_result_problems(result) == []
    assert result["started_at"] == reports[0]["started_at"]
    assert result["tool"] == "nvml" and [g["result"] for g in result["gpus"]] == ["pass", "pass"]
    assert [g["uuid"] for g in result["gpus"]] == item["gpus"]
    assert len(reports) == 2  # offered in several answers, run once


def test_one_diagnostic_at_a_time_and_none_dropped(stub, tmp_path):
    fake = fake_dcgmi(tmp_path / "bin", 0.8)
    first, second = command(level=3), command(level=1)
    stub.commands.extend([first, second])
    with Host(tmp_path / "spool", stub.url, dcgmi=str(fake)):
        wait_for(lambda: {first["id"], second["id"]} <= set(stub.results()))
    results = stub.results()
    ends = sorted((results[i]["started_at"], results[i]["finished_at"]) for i in (first["id"], second["id"]))
    assert ends[0][1] <= ends[1][0], ends  # the second started after the first finished
    assert all(r["tool"] == "dcgmi" and r["tool_version"] == "4.2.3" for r in results.values())
    assert all(diagnostic_result_problems(r) == [] for r in results.values())


def test_a_result_the_portal_cannot_take_now_is_kept_and_sent_later_even_after_a_restart(stub, tmp_path):
    item = command()
    stub.commands.append(item)
    stub.diag_script = [503, "drop", 503]  # the started post (once), then the result twice
    with Host(tmp_path, stub.url) as host:
        wait_for(lambda: host.diagnostics.finished == 1)
        wait_for(lambda: item["id"] in stub.results())
    assert [list(body)[0] for i, body in stub.diag_reports if i == item["id"]] == ["started_at", "started_at"]

    # Portal down when the result is ready: it waits in diagnostics.db for the next start.
    item2 = command()
    stub.commands.append(item2)
    with Host(tmp_path, stub.url, dcgmi=str(fake_dcgmi(tmp_path / "bin", 1.0))) as host:
        wait_for(lambda: any(i == item2["id"] for i, _ in stub.diag_reports))  # started reported
        stub.stop()
        wait_for(lambda: host.diagnostics.finished == 1)
        time.sleep(0.3)
    pending = DiagnosticStore(tmp_path)
    assert [(i, kind) for i, kind, _body in pending.reports_pending()] == [(item2["id"], "result")]
    pending.close()
    stub.start()
    with Host(tmp_path, stub.url):
        wait_for(lambda: item2["id"] in stub.results())
    assert DiagnosticStore(tmp_path).reports_pending() == []


def test_the_portals_404_or_409_ends_a_report_and_a_refused_start_runs_nothing(stub, tmp_path):
    stranger = command()  # not in stub.commands: the portal answers 404 to its start
    store = DiagnosticStore(tmp_path)
    diagnostics = Diagnostics(
        runner=Runner(device=SimulatedDeviceClient(count=1, scenarios=["healthy"], hostname=HOST)),
        store=store,
        sender=Sender(url=stub.url, token="tok", timeout_s=1.0),
    )
    diagnostics.offer_answer(json.dumps({"commands": [stranger]}))
    job = store.job_next()
    assert diagnostics.run_one(job) is None
    assert store.job_state(stranger["id"]) == "done" and store.reports_pending() == []

    item = command()
    stub.commands.append(item)
    diagnostics.offer_answer(json.dumps({"commands": [item]}))
    diagnostics.run_one(store.job_next())
    stub.diag_state[item["id"]] = "done"  # e.g. expired and answered already
    assert diagnostics.report_step() == 0.0  # 409: dropped, not retried
    assert store.reports_pending() == []
    store.close()


def test_a_corrupt_diagnostics_file_is_moved_aside_not_a_crash_loop(tmp_path, caplog):
    (tmp_path / "diagnostics.db").write_bytes(b"this is not a database" * 100)
    store = DiagnosticStore(tmp_path)
    assert store.job_offer(parse_commands(json.dumps({"commands": [command()]}))[0])
    store.close()
    assert [p.name.startswith("diagnostics.db.corrupt-") for p in tmp_path.iterdir()].count(True) == 1
    assert "is corrupt" in caplog.text


def test_what_each_answer_to_a_report_means():
    from agents.commands import report_outcome
    from agents.push import SendResult

    def outcome(status, payload, base="reject"):
        return report_outcome(SendResult(base, status, payload if isinstance(payload, str) else json.dumps(payload)))

    assert outcome(200, {}, "done") == "done"
    assert outcome(404, {"error": "no such diagnostic"}) == "final"
    assert outcome(409, {"error": "already has a result"}) == "final"
    assert outcome(404, "<html>proxy</html>", "hold") == "hold"  # not the portal's: a wrong URL
    clock = {"error": "invalid", "detail": [{"loc": "started_at", "msg": "too far in the future"}]}
    assert outcome(400, clock) == "hold"
    assert outcome(400, {"error": "invalid", "detail": [{"loc": "gpus.0.result", "msg": "no"}]}) == "reject"


def test_a_bad_token_holds_the_report(stub, tmp_path):
    item = command()
    stub.commands.append(item)
    store = DiagnosticStore(tmp_path)
    diagnostics = Diagnostics(
        runner=Runner(device=SimulatedDeviceClient(count=1, scenarios=["healthy"], hostname=HOST)),
        store=store,
        sender=Sender(url=stub.url, token="wrong", timeout_s=1.0),
    )
    diagnostics.offer_answer(json.dumps({"commands": [item]}))
    diagnostics.run_one(store.job_next())
    assert diagnostics.report_step() >= 15  # held: 30 s growing, with jitter
    assert [kind for _i, kind, _b in store.reports_pending()] == ["started", "result"]
    store.close()


def test_a_diagnostic_cut_short_runs_again_at_the_next_start_then_is_reported_failed(stub, tmp_path):
    item = command(gpus=[gpu_uuid(HOST, 1)])
    stub.commands.append(item)
    store = DiagnosticStore(tmp_path)
    store.job_offer(parse_commands(json.dumps({"commands": [item]}))[0])
    store.job_start(item["id"], time.time(), {"started_at": "2026-12-05T00:00:00.000Z"})
    store.close()  # the agent died here
    with Host(tmp_path, stub.url):
        wait_for(lambda: item["id"] in stub.results())
    assert [g["result"] for g in stub.results()[item["id"]]["gpus"]] == ["pass"]

    again = command()
    stub.commands.append(again)
    store = DiagnosticStore(tmp_path)
    store.job_offer(parse_commands(json.dumps({"commands": [again]}))[0])
    for _ in range(2):
        store.job_start(again["id"], time.time(), None)
    store.close()
    with Host(tmp_path, stub.url):
        wait_for(lambda: again["id"] in stub.results())
    result = stub.results()[again["id"]]
    assert diagnostic_result_problems(result) == []
    assert [g["result"] for g in result["gpus"]] == ["fail"]
    assert "stopped or crashed during this diagnostic 2 times" in result["gpus"][0]["tests"][0]["info"]


def test_the_daemon_takes_commands_and_sigterm_mid_diagnostic_loses_nothing(stub, tmp_path):
    """The real `python -m agents` process: a level-3 dcgmi run is cut by SIGTERM, and runs
    again (and is reported) after the restart."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "runs"
    fake = bin_dir / "dcgmi"
    fake.write_text(
        f"#!{sys.executable}\nimport sys, time\nopen({str(marker)!r}, 'a').write('run\\n')\n"
        "time.sleep(float(sys.argv[3] == '3' and open(%r).read().count('run') == 1 and 60 or 0))\n"
        % str(marker)
        + f"sys.stdout.write(open({str(REPO / 'tests/agents/fixtures/dcgm/dcgm4_pass.json')!r}).read())\n"
    )
    fake.chmod(0o755)
    item = command(level=3, gpus=[gpu_uuid(HOST, 0), gpu_uuid(HOST, 1)])
    stub.commands.append(item)
    argv = [sys.executable, "-m", "agents", "--url", stub.url, "--token", "tok", "--simulate", "2", "--hostname",
            HOST, "--interval", "0.2", "--spool-dir", str(tmp_path / "spool"), "--dcgmi", str(fake)]  # fmt: skip
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: marker.exists())
        assert [list(body) for i, body in stub.diag_reports] == [["started_at"]]
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
    finally:
        process.kill()
    assert item["id"] not in stub.results()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: item["id"] in stub.results(), timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=20)
    assert marker.read_text().count("run") == 2, err
    assert [g["result"] for g in stub.results()[item["id"]]["gpus"]] == ["pass", "pass"]
    assert "running it again" in err
