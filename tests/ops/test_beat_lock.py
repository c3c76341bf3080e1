"""Exactly one beat per cluster: a second beat waits for the lock instead of doubling every
schedule, takes over when the first goes, and a beat that loses its lock stops itself."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from portal.ops.beat_lock import beat_lock_acquire

REPO = Path(__file__).resolve().parents[2]


def test_a_second_holder_waits_until_the_first_releases(settings, tmp_path, transactional_db):
    settings.VAR_DIR = tmp_path
    first = beat_lock_acquire(timeout_s=1, poll_s=0.05)
    assert first is not None and first.held()
    assert beat_lock_acquire(timeout_s=0.3, poll_s=0.05) is None
    first.release()
    second = beat_lock_acquire(timeout_s=1, poll_s=0.05)
    assert second is not None and second.held()
    second.release()


@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_lock_is_the_clusters(require_postgres):
    first = beat_lock_acquire(timeout_s=2, poll_s=0.05)
    assert first is not None and first.kind == "postgresql" and first.held()
    assert beat_lock_acquire(timeout_s=0.3, poll_s=0.05) is None
    lost = threading.Event()
    first.watch(on_lost=lost.set, interval_s=0.05)
    # The watch's own thread asks through the lock's connection: a healthy lock stays held.
    assert not lost.wait(0.5), "the watch took a held lock for lost"
    first._connection.close()  # the database dropped the session (a restart)
    assert lost.wait(5), "the watch did not notice the lost lock"
    second = beat_lock_acquire(timeout_s=2, poll_s=0.05)
    assert second is not None and second.held()
    second.release()


def _beat(var_dir: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE", "DATABASE_URL"}}
    env.update(VAR_DIR=str(var_dir), DEBUG="true", PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="portal.settings")
    command = [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
               "--schedule", str(var_dir / f"schedule-{log.stem}")]  # fmt: skip
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def _wait_for(path: Path, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_two_real_beats_one_waits_then_takes_over(tmp_path):
    """Two `celery beat` processes on one embedded portal: the second waits, sends nothing, and
    takes over (with its first due tasks) once the first is stopped."""
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = _beat(tmp_path, first_log)
    second = None
    try:
        assert _wait_for(tmp_path / "beat.lock", str(first.pid), 60), first_log.read_text()[-3000:]
        second = _beat(tmp_path, second_log)
        assert _wait_for(second_log, "another beat holds the cluster's beat lock", 60), second_log.read_text()[-3000:]
        time.sleep(3)
        assert "Sending due task" not in second_log.read_text()
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(30)
        assert _wait_for(second_log, "beat lock acquired", 30), second_log.read_text()[-3000:]
        assert _wait_for(second_log, "Sending due task", 60), second_log.read_text()[-3000:]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
