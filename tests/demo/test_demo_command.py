"""`manage.py demo` as a newcomer runs it: tickets within the first minute, and Ctrl-C leaves no
process behind (portal, worker, beat and the simulated agents)."""

import os
import signal
import time
from pathlib import Path

import pytest

from portal.demo import slurm
from portal.maintenance.models import Ticket
from portal.ops.supervise import free_port
from portal.scheduler.models import SchedulerAction
from tests.ops.test_embedded import alive, descendants, embedded_env, manage_until_stopped, row_count, wait_for

pytestmark = pytest.mark.slow


def test_demo_opens_tickets_within_a_minute_and_ctrl_c_stops_everything(tmp_path):
    env = embedded_env(tmp_path)
    del env["DEBUG"]  # manage.py turns it on for the demo
    log = tmp_path / "demo.log"
    command = ["demo", "--port", str(free_port())]
    with manage_until_stopped(command, env, log, up_within_s=120, stop=signal.SIGINT) as demo:  # SIGINT: Ctrl-C
        up = time.monotonic()
        db = tmp_path / "portal.sqlite3"
        # Preventive tickets for the seeded hosts at once, an XID ticket from sim-desk-c soon after.
        wait_for(lambda: row_count(db, Ticket, "rule LIKE 'schedule_%'"), 30, "no due ticket", log)
        desk_xid = "rule LIKE 'xid%' AND host_id = (SELECT id FROM fleet_host WHERE hostname = 'sim-desk-c')"
        wait_for(lambda: row_count(db, Ticket, desk_xid), 60, "no XID ticket from sim-desk-c", log)
        assert time.monotonic() - up < 60
        if not slurm.missing_commands() and os.geteuid() == 0:  # the demo's own Slurm node drains
            drained = "kind = 'drain' AND state = 'done' AND outcome LIKE 'Slurm node % drained: gpu-fleet #%'"
            wait_for(lambda: row_count(db, SchedulerAction, drained), 60, "no drained Slurm node", log)
        children = descendants(demo.pid)
        commands = [Path(f"/proc/{pid}/cmdline").read_text() for pid in children if alive(pid)]
        assert sum("\0-m\0agents\0" in command for command in commands) == 3
    time.sleep(0.2)
    assert not [pid for pid in children if alive(pid)], "processes left behind"
