"""The embedded default runs the whole product: `manage.py run` starts the web server, a real
Celery worker and beat on the broker kept in files under VAR_DIR, over SQLite, and stops every
process it started on SIGTERM.

These start real processes (a few seconds each); the unit tests elsewhere call services directly.
"""

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from portal.maintenance.models import Ticket
from portal.maintenance.rules import AGENT_SILENT
from portal.ops.supervise import free_port
from portal.telemetry.models import Rollup1m, StageDone
from tests.live_socket import LiveSocket, signed_in_cookies
from tests.portal_process import REPO, ingest_post, manage, migrate
from tests.telemetry.batches import make_batch

pytestmark = pytest.mark.slow


def embedded_env(var_dir: Path, **overrides: str) -> dict[str, str]:
    """The embedded default as a new user gets it: no REDIS_URL, SQLite, tasks sent to a worker."""
    drop = {"REDIS_URL", "DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(VAR_DIR=str(var_dir), DEBUG="true", PYTHONUNBUFFERED="1", **overrides)
    return env


def descendants(pid: int) -> set[int]:
    """Every process below pid (children of children too), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(predicate, timeout_s: float, what: str, log: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} within {timeout_s:.0f} s; the portal's output:\n{log.read_text()[-6000:]}")


@contextlib.contextmanager
def manage_until_stopped(args: list[str], env: dict[str, str], log: Path, *, up_within_s: float, stop=signal.SIGTERM):
    """`manage.py ARGS` (run or demo) in a subprocess; the block runs once it says "The portal is
    up". Afterwards, if it still runs, it gets `stop`: not gone within 30 s fails the test."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_for(
            lambda: "The portal is up" in log.read_text(), up_within_s, f"manage.py {args[0]} did not come up", log
        )
        yield process
    finally:
        stopped = process.poll() is not None or _stop(process, stop)
    if not stopped:  # (not raised over a failure of the block: that one says more)
        raise AssertionError(f"manage.py {args[0]} did not stop within 30 s of {stop.name}")


def _stop(process: subprocess.Popen, sig: signal.Signals) -> bool:
    """Send sig; True if the process ends within 30 s, else kill it and return False."""
    process.send_signal(sig)
    try:
        process.wait(timeout=30)
        return True
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False


@contextlib.contextmanager
def portal_run(var_dir: Path, **overrides: str):
    """`manage.py run` in a subprocess; yields (process, base_url, env, log)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    env = embedded_env(var_dir, **overrides)
    port = free_port()
    log = var_dir / "run.log"
    # A fresh VAR_DIR: every migration, the catalogues and the agent's distribution first; alone
    # that is ~20 s, beside the suite's three other workers on 2 cores it passed 60 s once.
    with manage_until_stopped(["run", "--port", str(port)], env, log, up_within_s=120) as process:
        yield process, f"http://127.0.0.1:{port}", env, log


def test_run_starts_web_worker_and_beat_and_sigterm_stops_every_one(tmp_path):
    with portal_run(tmp_path) as (process, base_url, env, log):
        children = descendants(process.pid)
        commands = " ".join(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ") for pid in children)
        assert "daphne" in commands
        assert "celery -A portal worker" in commands
        assert "celery -A portal beat" in commands
        with urllib.request.urlopen(base_url + "/healthz", timeout=5) as response:
            assert response.status == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()[-4000:]
    time.sleep(0.2)
    left = [pid for pid in children if alive(pid)]
    assert not left, f"processes left behind: {left}"


def row_count(db: Path, model, where: str = "1=1", *params) -> int:
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as connection:
        return connection.execute(f"SELECT COUNT(*) FROM {model._meta.db_table} WHERE {where}", params).fetchone()[0]


VIEWER_PASSWORD = "viewer-password-for-the-live-feed"
VIEWER_CREATE = (
    "from django.contrib.auth import get_user_model; from portal.accounts.services import user_set_role; "
    f"user = get_user_model().objects.create_user('viewer', password={VIEWER_PASSWORD!r}); "
    "user_set_role(user=user, role='viewer')"
)


def test_worker_evaluates_ingest_and_beat_drives_rollups_and_silence(tmp_path):
    # Beat's intervals at 2 %: rollups every 0.6 s, the silence check every 1.2 s.
    env = embedded_env(tmp_path, DJANGO_SETTINGS_MODULE="tests.settings_fast_beat")
    migrate(env)
    token = manage(env, "issue_token", "lab-01").stdout.strip().splitlines()[-1]
    silence = (
        "from portal.fleet.models import Host; from portal.maintenance.rules import AGENT_SILENT; "
        "from portal.maintenance.services.config import rule_config_set; "
        "rule_config_set(rule=AGENT_SILENT.key, params={'silent_after_s': 3}, host=Host.objects.get(hostname='lab-01'))"
    )
    manage(env, "shell", "-c", silence)
    manage(env, "shell", "-c", VIEWER_CREATE)
    db = tmp_path / "portal.sqlite3"
    with portal_run(tmp_path, DJANGO_SETTINGS_MODULE="tests.settings_fast_beat") as (process, base_url, env, log):
        feed = LiveSocket(base_url, "/ws/live/tickets/", signed_in_cookies(base_url, "viewer", VIEWER_PASSWORD))
        assert feed.receive_json(timeout=10)["kind"] == "hello"
        batch = make_batch("lab-01", readings=3)
        batch["readings"][-1]["xid_events"] = [{"code": 79, "ts": batch["readings"][-1]["ts"]}]
        assert ingest_post(base_url, token, batch)[0] == 202
        # The web server only stored the batch: the worker evaluated it (an XID ticket) ...
        wait_for(lambda: row_count(db, StageDone, "stage = 'rules'"), 30, "no batch was evaluated", log)
        wait_for(lambda: "Task portal.telemetry.tasks.pipeline_run_task" in log.read_text(), 10,
                  "the worker did not receive the pipeline task", log)  # fmt: skip
        assert row_count(db, Ticket, "rule LIKE 'xid%'") == 1
        # ... and the web server's ticket feed heard of it, though the worker has no listener.
        message = feed.receive_json(timeout=15)
        feed.close()
        assert message["kind"] == "tickets" and message["events"][0]["event"] == "opened", message
        assert message["events"][0]["hostname"] == "lab-01" and "XID" in message["events"][0]["title"], message
        # ... the same pipeline run rolled it up ...
        wait_for(lambda: row_count(db, Rollup1m), 30, "no rollup appeared", log)
        # ... and with no reading for 3 s, beat's silence check opened "agent silent".
        wait_for(lambda: row_count(db, Ticket, "rule = ?", AGENT_SILENT.key), 30, "no agent-silent ticket", log)


def test_readings_wait_for_a_worker_without_one_and_are_caught_up_when_it_starts(tmp_path):
    """Plain Daphne serves ingest without a worker; `run` catches up what was stored meanwhile."""
    from tests.portal_process import running_portal

    env = embedded_env(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path}/portal.sqlite3")
    migrate(env)
    token = manage(env, "issue_token", "lab-02").stdout.strip().splitlines()[-1]
    db = tmp_path / "portal.sqlite3"
    with running_portal(env, tmp_path) as portal:
        batch = make_batch("lab-02", readings=3)
        assert ingest_post(portal.base_url, token, batch)[0] == 202
        time.sleep(1)
        assert row_count(db, StageDone) == 0  # nothing evaluates without a worker
    with portal_run(tmp_path) as (process, base_url, env, log):
        wait_for(lambda: row_count(db, StageDone, "stage = 'rules'"), 30, "the stored batch was not caught up", log)
        wait_for(lambda: row_count(db, Rollup1m), 30, "the stored batch was not rolled up", log)
