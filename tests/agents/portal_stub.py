"""A stand-in portal ingest endpoint on 127.0.0.1: a real HTTP server that answers on cue."""

from __future__ import annotations

import gzip
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class PortalStub:
    """Stores batches idempotently by batch_id, like the portal. `script` holds the next
    answers to give instead: an int status, ("429", retry_after), "hang" (store, then answer
    too late), "drop" (close without answering), ("raw", status, text) for a non-JSON answer (as
    Django's host check or a proxy gives), or (status, payload) for that JSON answer.
    `reject_reading(reading) -> bool` refuses a batch holding such a reading with a 400 naming it;
    `fail_ratio` answers 503 to that share of posts (random, seeded).

    Diagnostics (ingest-v1 "Commands"): every command in `commands` rides on each 202/200
    answer until the agent reports it started, as the portal does; `POST
    /api/v1/diagnostics/{id}/result` is stored in `diag_reports` as (id, body) and answered 202
    for `{"started_at"}` alone, 200 for a result, 409 for a second result, 404 for an id not in
    `commands`; `diag_script` holds the next answers to give instead (as `script`)."""

    def __init__(self, token: str = "tok") -> None:
        self.token = token
        self.stored: list[str] = []  # batch_ids in the order they were accepted
        self.bodies: list[dict] = []
        self.attempts: list[tuple[float, str]] = []  # (monotonic time, batch_id) of every request
        self.headers: list[dict] = []
        self.script: list = []
        self.reject_ids: set[str] = set()
        self.reject_reading = None
        self.fail_ratio = 0.0
        self.rng = random.Random(12)
        self.failed = 0
        self.hang_s = 1.0
        self.commands: list[dict] = []
        self.diag_reports: list[tuple[str, dict]] = []
        self.diag_script: list = []
        self.diag_state: dict[str, str] = {}  # id -> running / done
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = 0
        self.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                stub.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        """Down: connections are refused until start() again (same port)."""
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        raw = request.rfile.read(int(request.headers["Content-Length"]))
        body = gzip.decompress(raw) if request.headers.get("Content-Encoding") == "gzip" else raw
        if request.path.startswith("/api/v1/diagnostics/"):
            return self.handle_diagnostic(request, body)
        batch = json.loads(body)
        batch_id = batch["batch_id"]
        with self.lock:
            self.attempts.append((time.monotonic(), batch_id))
            self.headers.append(dict(request.headers))
            cue = self.script.pop(0) if self.script else None
            if cue is None and self.fail_ratio and self.rng.random() < self.fail_ratio:
                cue = 503
            if cue is not None:
                self.failed += 1
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self.answer(request, 401, {"error": "bad token"})
        if cue == "drop":
            request.close_connection = True
            request.connection.close()
            return None
        if isinstance(cue, int):
            return self.answer(request, cue, {"error": "on cue"})
        if isinstance(cue, tuple) and cue[0] == "raw":
            return self.answer_raw(request, cue[1], cue[2])
        if isinstance(cue, tuple) and isinstance(cue[0], int):
            return self.answer(request, cue[0], cue[1])
        if isinstance(cue, tuple) and cue[0] == "429":
            return self.answer(request, 429, {"error": "slow down"}, {"Retry-After": str(cue[1])})
        if batch_id in self.reject_ids:
            detail = [{"loc": "gpus.0.temp_shutdown_c", "msg": "no"}]
            return self.answer(request, 400, {"error": "invalid", "detail": detail})
        if self.reject_reading is not None:
            bad = [i for i, r in enumerate(batch.get("readings", [])) if self.reject_reading(r)]
            if bad:
                detail = [{"loc": f"readings.{i}.temperature_c", "msg": "odd"} for i in bad]
                return self.answer(request, 400, {"error": "invalid", "detail": detail})
        with self.lock:
            duplicate = batch_id in self.stored
            if not duplicate:
                self.stored.append(batch_id)
                self.bodies.append(batch)
        if cue == "hang":
            time.sleep(self.hang_s)
        offered = self.offered_commands()
        if duplicate:
            return self.answer(request, 200, {"accepted": 0, "duplicate": True, **offered})
        return self.answer(request, 202, {"accepted": len(batch.get("readings", [])), "duplicate": False, **offered})

    def offered_commands(self) -> dict:
        with self.lock:
            commands = [c for c in self.commands if c.get("id") not in self.diag_state]
        return {"commands": commands} if commands else {}

    def handle_diagnostic(self, request: BaseHTTPRequestHandler, body: bytes) -> None:
        parts = request.path.strip("/").split("/")  # api v1 diagnostics <id> result
        if len(parts) != 5 or parts[4] != "result":
            return self.answer(request, 404, {"error": "not found"})
        diagnostic_id = parts[3]
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self.answer(request, 401, {"error": "bad token"})
        with self.lock:
            cue = self.diag_script.pop(0) if self.diag_script else None
        if cue == "drop":
            request.close_connection = True
            request.connection.close()
            return None
        if isinstance(cue, int):
            return self.answer(request, cue, {"error": "on cue"})
        if isinstance(cue, tuple) and cue[0] == "raw":
            return self.answer_raw(request, cue[1], cue[2])
        report = json.loads(body)
        with self.lock:
            known = any(c.get("id") == diagnostic_id for c in self.commands)
            if not known:
                return self.answer(request, 404, {"error": "no such diagnostic for this host"})
            if self.diag_state.get(diagnostic_id) == "done":
                return self.answer(request, 409, {"error": "this diagnostic already has a result"})
            self.diag_reports.append((diagnostic_id, report))
            if set(report) == {"started_at"}:
                self.diag_state[diagnostic_id] = "running"
                return self.answer(request, 202, {"id": diagnostic_id, "state": "running"})
            self.diag_state[diagnostic_id] = "done"
        return self.answer(request, 200, {"id": diagnostic_id, "state": "passed"})

    def results(self) -> dict[str, dict]:
        """The result reports received, by diagnostic id."""
        with self.lock:
            return {i: body for i, body in self.diag_reports if set(body) != {"started_at"}}

    @staticmethod
    def answer_raw(request, status: int, text: str) -> None:
        data = text.encode()
        try:
            request.send_response(status)
            request.send_header("Content-Type", "text/html")
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        except OSError:
            pass

    def readings(self) -> list[tuple[str, str]]:
        """(gpu_uuid, ts) of every stored reading, in the order stored."""
        return [(r["gpu_uuid"], r["ts"]) for body in self.bodies for r in body.get("readings", [])]

    @staticmethod
    def answer(request, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            request.send_response(status)
            for key, value in (headers or {}).items():
                request.send_header(key, value)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        except OSError:
            pass  # the agent gave up waiting ("hang"); that is the point
