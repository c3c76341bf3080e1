"""`make soak` in 60 seconds: the deploy/ cluster (its own PostgreSQL and Redis, Debian's nginx
with deploy/nginx/gpu-fleet.conf in front of two web nodes, two worker nodes and beat started by
their units) under 40 simulated agents, with a web node and a worker killed, Redis and
PostgreSQL restarted and an agent cut off. Every reading generated is stored exactly once, the
hot GPUs and the silent host get their tickets, no 5xx outside the outages, and nothing it
started is left running."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")),
    reason="the soak brings its own PostgreSQL and Redis: it runs once, in the suite's SQLite pass",
)


def _session_members(sid: int) -> list[str]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) == sid:  # the session id
            members.append(f"{entry} {command[:200]}")
    return members


@pytest.mark.serial
def test_sixty_second_soak_loses_nothing(tmp_path):
    needed = {
        "nginx": shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None),
        "openssl": shutil.which("openssl"),
        "redis-server": shutil.which("redis-server"),
        "PostgreSQL's pg_ctl": next(iter(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")), None),
    }
    missing = [name for name, path in needed.items() if not path]
    if missing:
        skip_or_fail(f"{', '.join(missing)} missing: apt-get install nginx openssl redis-server postgresql")
    report_file = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(SOAK_SECONDS="60", SOAK_AGENTS="40", SOAK_REPORT=str(report_file), SOAK_DRAIN_TIMEOUT_S="120")
    process = subprocess.Popen(
        [sys.executable, "bench/soak.py"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        output, _ = process.communicate()
        pytest.fail(f"the soak did not finish in 7 minutes:\n{output[-6000:]}")
    left = _session_members(process.pid)
    assert not left, f"the soak left processes running: {left}"
    assert report_file.exists(), output[-6000:]
    report = json.loads(report_file.read_text())
    failed = [name for name, ok in report["checks"].items() if not ok]
    assert not failed and process.returncode == 0, f"{failed}\n{output[-6000:]}"
    # Every fault really happened.
    events = "\n".join(report["events"])
    for fault in ("web-1 SIGKILLed", "worker-1 SIGKILLed", "Redis stopped", "Redis started again",
                  "PostgreSQL restarted", "cut off"):  # fmt: skip
        assert fault in events, f"{fault!r} not in the soak's events:\n{events}"
    assert report["generated"] > 0 and report["stored"] == report["generated"] == report["stored_distinct"]
    assert report["tickets_raised"] == report["tickets_expected"]
    assert report["tickets_expected"]["overheat"] >= 2 and report["tickets_expected"]["agent_silent"] == 1
