"""A throwaway metric added to the registry (portal/telemetry/metrics.py) flows from ingest to the
rollups and the live payload with nothing but its entry: throwaway_metric_child.py, run in its own
process, where the registry and everything built from it see the extra metric from the start."""

import json
import os
import subprocess
import sys
from pathlib import Path

THROWAWAY = {
    "name": "board_voltage_mv", "unit": "mV", "type": "int", "ge": 0, "le": 100_000, "codec": "integer",
    "label": "Board voltage", "rollup": "min_max_mean", "group": "power", "live": True,
}  # fmt: skip


def test_a_throwaway_metric_flows_through_the_pipeline():
    child = Path(__file__).with_name("throwaway_metric_child.py")
    env = {**os.environ, "PORTAL_EXTRA_METRICS": json.dumps([THROWAWAY])}
    command = [sys.executable, "-m", "pytest", str(child), "-q", "-p", "no:cacheprovider", "--nomigrations"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout
