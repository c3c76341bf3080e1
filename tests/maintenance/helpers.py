"""Reading series for rule tests, handed to the pipeline's rules stage with their own timestamps."""

import contextlib
import datetime as dt
import http.server
import json
import threading
import time

from django.db import OperationalError, transaction

from portal.fleet.models import Gpu
from portal.maintenance.rules.base import READING_COLUMNS
from portal.maintenance.services.evaluate import EvaluationResult, rules_prepare
from portal.telemetry.columns import READING_ROW_COLUMNS
from portal.telemetry.pipeline import Block

T0 = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.UTC)

HEALTHY = {
    "temperature_c": 65, "fan_speed_pct": 55, "power_w": 250.0, "power_limit_w": 300.0, "utilization_gpu_pct": 90,
    "sm_clock_mhz": 2400, "throttle_reasons": 0, "ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0,
    "ecc_uncorrected_aggregate": 0, "retired_pages_pending": False, "remapped_rows_pending": False,
    "remapped_rows_failure": False, "pcie_link_gen": 4, "pcie_link_width": 16, "pcie_replay_count": 0,
}  # fmt: skip


def row(ts: dt.datetime, **values) -> tuple:
    """One reading; unless given, the fan follows the temperature like a fan controller would."""
    merged = {**HEALTHY, **values, "ts": ts}
    if "fan_speed_pct" not in values:
        merged["fan_speed_pct"] = round(max(30, min(100, 30 + (merged["temperature_c"] - 50) * 2.5)))
    return tuple(merged[name] for name in READING_COLUMNS)


def series(values: list[dict], start: dt.datetime = T0, step_s: float = 10) -> list[tuple]:
    return [row(start + dt.timedelta(seconds=i * step_s), **v) for i, v in enumerate(values)]


def _stored(gpu_id: int, row: tuple) -> tuple:
    values = dict(zip(READING_COLUMNS, row, strict=True))
    return tuple(gpu_id if name == "gpu_id" else values.get(name) for name in READING_ROW_COLUMNS)


def rules_stage_run(*, readings: dict[int, list[tuple]], xids=None) -> EvaluationResult:
    """The rules stage over readings (GPU id → rows as `row` makes them, in time order) and XID
    events (GPU id → [(epoch s, code)]), handed to it as the pipeline hands it a block of stored
    batches: judged, then applied in one transaction."""
    xids = xids or {}
    gpu_hosts = dict(Gpu.objects.filter(pk__in=[*readings, *xids]).values_list("id", "host_id"))
    stored = {gpu_id: [_stored(gpu_id, row) for row in rows] for gpu_id, rows in readings.items()}
    prepared = rules_prepare(Block(batches=[], readings=stored, xids=xids, gpu_hosts=gpu_hosts))
    with transaction.atomic():
        return prepared.apply()


def feed(gpu, rows: list[tuple], chunk: int = 30, xids=None):
    """Evaluate rows in batches of `chunk` readings, as agents would send them; returns every outcome."""
    outcomes = []
    for start in range(0, len(rows), chunk):
        result = rules_stage_run(readings={gpu.pk: rows[start : start + chunk]}, xids=xids if start == 0 else None)
        outcomes += result.tickets
    if not rows and xids:
        outcomes += rules_stage_run(readings={}, xids=xids).tickets
    return outcomes


@contextlib.contextmanager
def celery_configured(**conf):
    """The portal's Celery app with some options changed (broker_url, task_always_eager, …), put
    back afterwards. The connection and producer pools are dropped both ways, so a new broker URL
    takes effect and the old one comes back."""
    from portal.celery import app

    def reset_pools():
        # Dropped, not closed: kombu keeps the pools per broker URL and hands the same ones out again.
        app._pool = None
        app.amqp._producer_pool = None

    saved = {name: app.conf[name] for name in conf}
    app.conf.update(conf)
    reset_pools()
    try:
        yield app
    finally:
        app.conf.update(saved)
        reset_pools()


class WebhookServer:
    """A real HTTP server on 127.0.0.1 (ephemeral port) in a thread. It answers each POST with the
    next status of `statuses` (the last one repeats) and keeps every request body."""

    def __init__(self, statuses, location: str | None = None):
        self.statuses = list(statuses)
        self.bodies: list[dict] = []
        self.hosts: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                server.bodies.append(json.loads(self.rfile.read(length)))
                server.hosts.append(self.headers.get("Host", ""))
                status = server.statuses.pop(0) if len(server.statuses) > 1 else server.statuses[0]
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def worker_wait_for(condition, timeout: float) -> bool:
    """Whether `condition()` held within `timeout` seconds, asked every quarter second while a
    worker thread of this process writes. SQLite's shared-cache test database refuses a read of a
    table that thread is writing ("database table is locked") instead of waiting: asked again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except OperationalError as error:
            if "locked" not in str(error):
                raise
        time.sleep(0.25)
    return False
