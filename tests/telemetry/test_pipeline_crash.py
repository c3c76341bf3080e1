"""A worker killed in the middle of a pipeline pass: after a restart every stage has finished every
batch exactly once. The run that was killed and restarted leaves the database as a run that never
stopped does (tickets, rule states, rollups, wear meters), and the ledger holds one row per stage
and batch.

Each run is a real process on a database file of its own (tests/telemetry/pipeline_crash_child.py):
the kill (SIGKILL) comes inside one stage's transaction, after its effects and its ledger rows are
written and before they commit."""

import datetime as dt
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.utils import timezone

from tests.portal_process import REPO, migrate
from tests.telemetry import pipeline_crash_child as child

pytestmark = pytest.mark.slow

# What each stage derives, compared between the two runs (columns set from the clock left out;
# "*": every column but the surrogate key).
COMPARED = {
    "maintenance_ticket": "rule, host_id, gpu_id, state, occurrences, first_seen, last_seen, peak_value, severity",
    "maintenance_rulestate": "key, rule, state, since_ts, last_ts, peak, data",
    "telemetry_rollup1m": "*",
    "telemetry_rollup1h": "*",
    "wear_wearhour": "*",
    "wear_wearday": "*",
    "wear_wearstate": "gpu_id, last_ts, last_reading, powered_s, busy_s, hot_s, fan_high_s, energy_mj, cycles_total",
    "jobs_job": "key, scheduler, user, started_at, ended_at, gpu_hours, energy_mj, utilization_sum, idle",
    "jobs_jobspan": "gpu_id, started_at, ended_at, readings, utilization_sum, utilization_count, memory_used_max_mib, "
    "temperature_max_c, throttled_count, energy_mj, energy_last_mj",
}
STAGES = ("rules", "rollups", "wear", "jobs")


def _env(db: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(DATABASE_URL=f"sqlite:///{db}", VAR_DIR=str(db.parent), DEBUG="true", PYTHONUNBUFFERED="1")
    return env


def _child(db: Path, *args: str, wait: bool = True):
    command = [sys.executable, "-m", "tests.telemetry.pipeline_crash_child", *args]
    if not wait:
        return subprocess.Popen(command, cwd=REPO, env=_env(db), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    result = subprocess.run(command, cwd=REPO, env=_env(db), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _rows(db: Path) -> dict:
    with sqlite3.connect(db) as connection:
        out = {}
        for table, columns in COMPARED.items():
            if columns == "*":  # every column but the surrogate key
                names = [row[1] for row in connection.execute(f"PRAGMA table_info({table})") if row[1] != "id"]
                columns = ", ".join(names)
            out[table] = sorted(map(repr, connection.execute(f"SELECT {columns} FROM {table}").fetchall()))
        return out


def _ledger(db: Path) -> dict:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT stage, COUNT(*), COUNT(DISTINCT batch_pk) FROM telemetry_stagedone GROUP BY stage"
        )
        return {stage: (count, distinct) for stage, count, distinct in rows}


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A migrated database holding the batches, handed on to nobody yet."""
    db = tmp_path_factory.mktemp("crash") / "stored.sqlite3"
    migrate(_env(db))
    start = (timezone.now() - dt.timedelta(hours=2)).replace(microsecond=0)
    _child(db, "store", start.isoformat())
    return db


@pytest.fixture(scope="module")
def uninterrupted(stored) -> dict:
    db = stored.with_name("uninterrupted.sqlite3")
    shutil.copy(stored, db)
    _child(db, "run")
    rows = _rows(db)
    assert rows["maintenance_ticket"], "the scenario opens tickets"
    assert rows["wear_wearstate"] and rows["telemetry_rollup1m"] and rows["jobs_jobspan"]
    return rows


@pytest.mark.parametrize("stage", STAGES)
def test_a_worker_killed_inside_a_stage_finishes_every_batch_once_after_a_restart(stored, uninterrupted, stage):
    db = stored.with_name(f"killed-in-{stage}.sqlite3")
    shutil.copy(stored, db)
    marker = db.with_suffix(".marker")
    process = _child(db, "crash", stage, str(marker), wait=False)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert process.poll() is None, process.stdout.read().decode()
            assert time.monotonic() < deadline, "the run never reached the second pass"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    # Killed in the second pass: the stage's first pass is committed, its second is not.
    assert _ledger(db)[stage] == (child.PASS, child.PASS)
    _child(db, "run")  # the worker, restarted
    batches = child.HOSTS * child.BATCHES
    assert _ledger(db) == dict.fromkeys(STAGES, (batches, batches))
    assert _rows(db) == uninterrupted
