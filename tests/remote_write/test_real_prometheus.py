"""A real Prometheus (Debian's package, /usr/bin/prometheus, started here with its own config and
data folder, and stopped) scrapes a page in dcgm-exporter's exposition format and remote-writes
to a running portal: the GPU's readings appear, and a throttling series opens the ticket an
agent's readings open. Run under `flock /tmp/slurm.lock` beside other tests of real services."""

import contextlib
import datetime as dt
import http.server
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from portal.ops.supervise import free_port
from tests.portal_process import ingest_post, manage, migrate, portal_env, running_portal
from tests.telemetry.batches import make_batch, make_reading

pytestmark = pytest.mark.slow

PROMETHEUS = Path("/usr/bin/prometheus")
UUID = "GPU-5e0c7a52-8a3e-4a9f-9a57-3f5d3c1e2b10"
HOSTNAME = "prom-gpu-1"
# Thermal throttling judged over 30 s instead of 10 minutes (for both paths alike), so that a
# test of a minute sees the ticket: opens with 10 s of readings, more than a fifth throttled.
THROTTLE_RULE = {"window_s": 30, "min_coverage_s": 10, "clear_for_s": 30, "max_gap_s": 30}
LABELS = (
    f'gpu="0",UUID="{UUID}",pci_bus_id="00000000:1B:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
    f'Hostname="{HOSTNAME}",DCGM_FI_DRIVER_VERSION="580.65.06"'
)
SERIES = {  # name: (type, help, value); throttling: hw_thermal (0x40)
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C).", 70),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", 612.5),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %).", 99),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM frequency (in MHz).", 1410),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB).", 70211),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("gauge", "Current clock throttle reasons.", 64),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered.", 0),
    "DCGM_FI_DEV_SM_ACTIVE": ("gauge", "Not mapped: skipped and counted.", 0.5),
}


class ExporterPage:
    """dcgm-exporter's /metrics: its series with the values above, no timestamps (Prometheus's
    scrape time, as with dcgm-exporter)."""

    def __init__(self):
        self.served = 0

    def text(self) -> bytes:
        self.served += 1
        lines = []
        for name, (kind, help_text, value) in SERIES.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{{{LABELS}}} {value}"]
        return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def exporter():
    page = ExporterPage()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = page.text()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError):  # Prometheus gave up on a scrape (its timeout)
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield page, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def prometheus_config(target: str, write_url: str, token: str) -> str:
    # The remote_write block of docs/production.md, with a fast scrape and send for the test.
    return f"""
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
scrape_configs:
  - job_name: dcgm
    static_configs:
      - targets: ["{target}"]
remote_write:
  - url: {write_url}
    authorization:
      credentials: {token}
    queue_config:
      batch_send_deadline: 500ms
    write_relabel_configs:
      - source_labels: [__name__]
        regex: DCGM_FI_.*
        action: keep
"""


def portal_state(portal) -> dict:
    script = (
        "import json; from portal.telemetry.models import Reading; from portal.maintenance.models import Ticket;"
        "from portal.remote_write.models import IngestSource as S; from portal.maintenance.models import RuleState;"
        "from portal.telemetry.models import IngestBatch;"
        f"r = Reading.objects.filter(gpu__uuid='{UUID}');"
        "print(json.dumps({'readings': r.count(), 'throttled': r.filter(throttle_reasons=64).count(),"
        "'tickets': sorted([t.gpu.host.hostname, t.rule, t.severity, t.state] for t in Ticket.objects.all()),"
        "'source': list(S.objects.values_list('samples_stored', 'samples_skipped', 'samples_dropped'))[0],"
        "'rules': [[k, st] for k, st in RuleState.objects.values_list('key', 'state')],"
        "'batches': IngestBatch.objects.count()}))"
    )
    return json.loads(manage(portal.env, "shell", "-c", script).stdout.strip().splitlines()[-1])


def test_readings_from_a_real_prometheus_open_the_agents_ticket(tmp_path, exporter):
    if not PROMETHEUS.exists() or shutil.which(str(PROMETHEUS)) is None:
        pytest.skip("Debian's prometheus package is not installed (apt-get install prometheus)")
    page, target = exporter
    var_dir = tmp_path / "portal"
    var_dir.mkdir()
    # Until two readings show a GPU's scrape interval, the portal assumes this one (a first reading
    # goes on after two of them).
    env = portal_env(var_dir, TEST_REMOTE_WRITE_SCRAPE_INTERVAL_S="1")
    migrate(env)
    token = manage(env, "issue_source_token", "lab-prometheus", "--hosts", "prom-*").stdout.strip().splitlines()[-1]
    agent_token = manage(env, "issue_token", "dgx-agent").stdout.strip().splitlines()[-1]
    manage(env, "shell", "-c", "from portal.maintenance.services.config import rule_config_set; "
           f"rule_config_set(rule='thermal_throttle', params={THROTTLE_RULE!r})")  # fmt: skip
    with running_portal(env, var_dir) as portal:
        config = tmp_path / "prometheus.yml"
        config.write_text(prometheus_config(target, portal.base_url + "/api/v1/prometheus/write", token))
        log = (tmp_path / "prometheus.log").open("w")
        command = [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                   f"--web.listen-address=127.0.0.1:{free_port()}"]  # fmt: skip
        prometheus = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            state = _wait_for(portal, lambda s: s["readings"] >= 24 and throttle_ticket(s), timeout_s=120)
        finally:
            prometheus.terminate()
            try:
                prometheus.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prometheus.kill()
                prometheus.wait()
            log.close()
        assert state["readings"] >= 24 and throttle_ticket(state), (
            state,
            (tmp_path / "prometheus.log").read_text()[-3000:],
        )
        assert state["throttled"] == state["readings"]
        stored, skipped, dropped = state["source"]
        assert stored >= 24 * 7 and skipped >= 24 and dropped == 0  # SM_ACTIVE: a series the mapping skips

        # The agent's path, the same readings: the same ticket.
        steps = [dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30 - i) for i in range(30)]
        batch = make_batch("dgx-agent", readings=0)
        gpu = batch["gpus"][0]["uuid"]
        batch["readings"] = [make_reading(gpu, ts, temperature_c=70, throttle_reasons=["hw_thermal"]) for ts in steps]
        assert ingest_post(portal.base_url, agent_token, batch)[0] == 202
        final = portal_state(portal)
        tickets = final["tickets"]
    assert [ticket[1:] for ticket in tickets if ticket[0] == HOSTNAME] == [["thermal_throttle", "warning", "open"]]
    assert [ticket[1:] for ticket in tickets if ticket[0] == "dgx-agent"] == [["thermal_throttle", "warning", "open"]]
    assert page.served >= 24


def throttle_ticket(state: dict) -> bool:
    return any(ticket[:2] == [HOSTNAME, "thermal_throttle"] for ticket in state["tickets"])


def _wait_for(portal, done, *, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    state = portal_state(portal)
    while not done(state) and time.monotonic() < deadline:
        time.sleep(3)
        state = portal_state(portal)
    return state
