"""Commands from the portal (ingest-v1.md, "Commands"): the answer to a batch may carry
`"commands": [{"id", "kind": "diagnose", "level": 1-3, "gpus": [uuid, ...]}]`.

The agent runs `diagnose` only, one at a time, in a thread of its own beside the collection
(which never waits for it); it reports `{"started_at"}` at once, then the result, to
`POST /api/v1/diagnostics/{id}/result`. A command is offered in every answer until the agent
reports it started, so commands are kept by id: one seen before is not run again. Unknown kinds
and malformed commands are logged and ignored; nothing in a command is ever run as a shell
command (agents.diagnose passes dcgmi an argument list of ints).

Nothing is lost: commands, reports still to send and the XID history live in a small SQLite
file beside the spool (`diagnostics.db`). Reports leave oldest first and are retried like
batches (5xx, 429, no answer: backoff; 401/403 or an answer not the portal's: held, retried
slowly); a 404 (not this host's diagnostic) or 409 (it already has a result, or expired) is the
portal's last word and the report is dropped, logged. A diagnostic cut short by a stop or a
crash runs again at the next start (once; a second interruption is reported as a failure).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.collector import rfc3339
from agents.device import XidEvent
from agents.diagnose import LEVELS, Interrupted, Runner, check, gpu_entry, resolve_targets
from agents.push import Backoff, Sender, SendResult
from agents.spool import durable_sqlite

log = logging.getLogger(__name__)

DIAGNOSTICS_FILE = "diagnostics.db"
RESULT_PATH = "/api/v1/diagnostics/{id}/result"
KEEP_DONE_S = 14 * 86400
MAX_RUNS = 2  # a diagnostic interrupted (stop, crash) runs once more, then is reported failed

SCHEMA = """
CREATE TABLE IF NOT EXISTS job (
    diagnostic_id TEXT PRIMARY KEY,
    level INTEGER NOT NULL,
    gpus TEXT,
    state TEXT NOT NULL,  -- queued, running, done
    received_at REAL NOT NULL,
    started_at REAL,
    runs INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS report (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    diagnostic_id TEXT NOT NULL,
    kind TEXT NOT NULL,  -- started, result
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS report_refused (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    diagnostic_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    status INTEGER NOT NULL,
    reason TEXT NOT NULL,
    refused_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS xid (gpu_uuid TEXT NOT NULL, ts REAL NOT NULL, code INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS xid_gpu ON xid (gpu_uuid, ts);
CREATE TABLE IF NOT EXISTS xid_mark (gpu_uuid TEXT PRIMARY KEY, ts REAL NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value REAL NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class Command:
    id: str
    kind: str
    level: int
    gpus: list[str] | None  # None: every GPU of this host


def parse_commands(answer: str) -> list[Command]:
    """The runnable commands of a portal answer; anything else is logged and left out."""
    try:
        payload = json.loads(answer)
    except ValueError:
        return []
    if not isinstance(payload, dict) or payload.get("commands") is None:
        return []
    raw = payload["commands"]
    if not isinstance(raw, list):
        log.warning("the portal's answer has 'commands' that is not a list; ignored")
        return []
    commands = []
    for item in raw:
        command = _parse_command(item)
        if command is not None:
            commands.append(command)
    return commands


def _parse_command(item: Any) -> Command | None:
    if not isinstance(item, dict):
        log.warning("ignoring a malformed command (not an object): %.200s", json.dumps(item))
        return None
    kind = item.get("kind")
    if kind != "diagnose":
        log.info("ignoring a command of kind %.50r that this agent does not know", kind)
        return None
    try:
        command_id = str(uuidlib.UUID(str(item.get("id"))))
    except ValueError:
        log.warning("ignoring a diagnose command without a valid id: %.200s", json.dumps(item))
        return None
    level = item.get("level")
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
        log.warning("ignoring diagnose command %s: level %.20r is not 1, 2 or 3", command_id, level)
        return None
    gpus = item.get("gpus")
    if gpus is not None:
        if not isinstance(gpus, list) or not all(isinstance(g, str) and 0 < len(g) <= 100 for g in gpus):
            log.warning("ignoring diagnose command %s: gpus is not a list of GPU uuids", command_id)
            return None
        gpus = list(dict.fromkeys(gpus)) or None
    return Command(id=command_id, kind=kind, level=level, gpus=gpus)


class DiagnosticStore:
    """Commands, reports still to send and the XID history, in SQLite (thread-safe). Without a
    directory it lives in memory (tests, `diagnose` by hand)."""

    def __init__(self, directory: str | Path | None, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        if directory is None:
            self.path: Path | None = None
            target = ":memory:"
        else:
            self.path = Path(directory) / DIAGNOSTICS_FILE
            self.path.parent.mkdir(parents=True, exist_ok=True)
            target = str(self.path)
        try:
            self._db = self._open(target)
        except sqlite3.DatabaseError as exc:
            if self.path is None:
                raise
            # As the spool does: a file SQLite cannot read must not stop every start.
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(clock()))
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
            for suffix in ("", "-wal", "-shm"):
                source = Path(str(self.path) + suffix)
                if source.exists():
                    source.replace(Path(str(aside) + suffix))
            log.error("%s is corrupt (%s): moved aside to %s; starting afresh", self.path, exc, aside.name)
            self._db = self._open(target)
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('first_seen', ?)", (clock(),))

    def _open(self, target: str) -> sqlite3.Connection:
        return durable_sqlite(target, SCHEMA, on_disk=self.path is not None)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # jobs
    def job_offer(self, command: Command) -> bool:
        """Keep a command unless its id is known; True when it is new."""
        with self._lock:
            cursor = self._db.execute(
                "INSERT OR IGNORE INTO job (diagnostic_id, level, gpus, state, received_at) "
                "VALUES (?, ?, ?, 'queued', ?)",
                (command.id, command.level, None if command.gpus is None else json.dumps(command.gpus), self._clock()),
            )
            return cursor.rowcount == 1

    def job_next(self) -> Command | None:
        with self._lock:
            row = self._db.execute(
                "SELECT diagnostic_id, level, gpus FROM job WHERE state = 'queued' ORDER BY received_at, rowid LIMIT 1"
            ).fetchone()
        if row is None:
            return None
        return Command(id=row[0], kind="diagnose", level=row[1], gpus=None if row[2] is None else json.loads(row[2]))

    def job_runs(self, diagnostic_id: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT runs FROM job WHERE diagnostic_id = ?", (diagnostic_id,)).fetchone()
        return row[0] if row else 0

    def job_start(self, diagnostic_id: str, started_at: float, report: dict[str, Any] | None) -> None:
        """Running from now; `report` (the started post) queued in the same transaction."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "UPDATE job SET state = 'running', started_at = ?, runs = runs + 1 WHERE diagnostic_id = ?",
                (started_at, diagnostic_id),
            )
            if report is not None:
                self._add_report(diagnostic_id, "started", report)

    def job_finish(self, diagnostic_id: str, result: dict[str, Any] | None) -> None:
        """Done; its result (if any) queued in the same transaction."""
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("UPDATE job SET state = 'done' WHERE diagnostic_id = ?", (diagnostic_id,))
            if result is not None:
                self._add_report(diagnostic_id, "result", result)
            self._db.execute("DELETE FROM job WHERE state = 'done' AND received_at < ?", (self._clock() - KEEP_DONE_S,))

    def jobs_interrupted(self) -> list[tuple[Command, float, int]]:
        """Jobs left running by a stop or crash: (command, started_at, runs)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT diagnostic_id, level, gpus, started_at, runs FROM job WHERE state = 'running' ORDER BY rowid"
            ).fetchall()
        return [
            (Command(r[0], "diagnose", r[1], None if r[2] is None else json.loads(r[2])), r[3] or 0.0, r[4])
            for r in rows
        ]

    def job_requeue(self, diagnostic_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE job SET state = 'queued' WHERE diagnostic_id = ?", (diagnostic_id,))

    def job_state(self, diagnostic_id: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT state FROM job WHERE diagnostic_id = ?", (diagnostic_id,)).fetchone()
        return row[0] if row else None

    # reports
    def _add_report(self, diagnostic_id: str, kind: str, body: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT INTO report (diagnostic_id, kind, body, created_at) VALUES (?, ?, ?, ?)",
            (diagnostic_id, kind, json.dumps(body, separators=(",", ":")), self._clock()),
        )

    def report_next(self) -> tuple[int, str, str, bytes] | None:
        with self._lock:
            row = self._db.execute("SELECT id, diagnostic_id, kind, body FROM report ORDER BY id LIMIT 1").fetchone()
            if row is None:
                return None
            self._db.execute("UPDATE report SET attempts = attempts + 1 WHERE id = ?", (row[0],))
        return row[0], row[1], row[2], row[3].encode()

    def report_done(self, report_id: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM report WHERE id = ?", (report_id,))

    def report_refused(self, report_id: int, *, status: int, reason: str) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO report_refused (diagnostic_id, kind, body, status, reason, refused_at) "
                "SELECT diagnostic_id, kind, body, ?, ?, ? FROM report WHERE id = ?",
                (status, reason[:2000], self._clock(), report_id),
            )
            self._db.execute("DELETE FROM report WHERE id = ?", (report_id,))

    def reports_pending(self) -> list[tuple[str, str, dict[str, Any]]]:
        with self._lock:
            rows = self._db.execute("SELECT diagnostic_id, kind, body FROM report ORDER BY id").fetchall()
        return [(r[0], r[1], json.loads(r[2])) for r in rows]

    # XID history (agents.diagnose.XidLog)
    def xid_state(self) -> tuple[dict[str, list[tuple[float, int]]], dict[str, float], float | None]:
        with self._lock:
            marks = dict(self._db.execute("SELECT gpu_uuid, ts FROM xid_mark").fetchall())
            events: dict[str, list[tuple[float, int]]] = {}
            for gpu, ts, code in self._db.execute("SELECT gpu_uuid, ts, code FROM xid ORDER BY ts"):
                events.setdefault(gpu, []).append((ts, code))
            first = self._db.execute("SELECT value FROM meta WHERE name = 'first_seen'").fetchone()
        return events, marks, first[0] if first else None

    def xid_add(self, events: Iterable[XidEvent]) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT INTO xid (gpu_uuid, ts, code) VALUES (?, ?, ?)", [(e.gpu_uuid, e.ts, e.code) for e in events]
            )

    def xid_mark(self, uuids: list[str], at: float) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            for gpu in uuids:
                self._db.execute("INSERT OR REPLACE INTO xid_mark (gpu_uuid, ts) VALUES (?, ?)", (gpu, at))
                self._db.execute("DELETE FROM xid WHERE gpu_uuid = ? AND ts < ?", (gpu, at))


def read_xid_state(directory: str | Path) -> tuple[dict[str, list[tuple[float, int]]], dict[str, float], float | None]:
    """A running agent's XID history, read from a copy (`diagnose` by hand, often as root, must
    neither change the agent's file nor leave files beside it that the agent's user cannot
    write; SQLite opening a WAL database, even read-only, would). The copy takes the write-ahead
    log along, so XIDs not yet checkpointed count too."""
    import shutil
    import tempfile

    source = Path(directory) / DIAGNOSTICS_FILE
    with tempfile.TemporaryDirectory(prefix="gpu-fleet-agent-") as scratch:
        for suffix in ("", "-wal"):
            if Path(str(source) + suffix).exists():
                shutil.copyfile(str(source) + suffix, Path(scratch) / (DIAGNOSTICS_FILE + suffix))
        db = sqlite3.connect(Path(scratch) / DIAGNOSTICS_FILE, timeout=30)
        try:
            marks = dict(db.execute("SELECT gpu_uuid, ts FROM xid_mark").fetchall())
            events: dict[str, list[tuple[float, int]]] = {}
            for gpu, ts, code in db.execute("SELECT gpu_uuid, ts, code FROM xid ORDER BY ts"):
                events.setdefault(gpu, []).append((ts, code))
            first = db.execute("SELECT value FROM meta WHERE name = 'first_seen'").fetchone()
        finally:
            db.close()
    return events, marks, first[0] if first else None


def _portal_json(detail: str) -> bool:
    try:
        payload = json.loads(detail)
    except ValueError:
        return False
    return isinstance(payload, dict)


def _time_refused(detail: str) -> bool:
    """A 400 naming only started_at / finished_at: a clock is off (ours or the portal's)."""
    try:
        items = json.loads(detail).get("detail") or []
        locs = [str(item.get("loc", "")).split(".")[-1] for item in items]
    except (ValueError, AttributeError, TypeError):
        return False
    return bool(locs) and all(loc in ("started_at", "finished_at") for loc in locs)


def report_outcome(result: SendResult) -> str:
    """done, final (the portal's last word: drop), reject (set aside), hold or retry."""
    if result.outcome == "done":
        return "done"
    if result.status in (404, 409) and _portal_json(result.detail):
        return "final"
    if result.status == 400 and _time_refused(result.detail):
        return "hold"  # kept and retried slowly until a person fixes the clock, as for batches
    return result.outcome


class Diagnostics:
    """Takes commands from the portal's answers and runs them, one at a time, in its own
    threads: `runner` runs diagnostics, `reporter` posts what they report."""

    def __init__(
        self,
        *,
        runner: Runner,
        store: DiagnosticStore,
        sender: Sender,
        backoff: Backoff | None = None,
        hold_backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
        idle_wait_s: float = 1.0,
    ) -> None:
        self.runner = runner
        self.store = store
        self._sender = sender
        self._backoff = backoff or Backoff(initial_s=1.0, max_s=60.0)
        self._hold_backoff = hold_backoff or Backoff(initial_s=30.0, max_s=600.0)
        self._clock = clock
        self._idle_wait_s = idle_wait_s
        self.wake_runner = threading.Event()
        self.wake_reporter = threading.Event()
        self.running: str | None = None  # the diagnostic being run now
        # Ids already kept: a command comes again in every answer until its start is reported.
        self._seen: set[str] = set()
        self.finished = 0
        self._threads: list[threading.Thread] = []

    # called by the sender thread with every answer the portal gave to a batch
    def offer_answer(self, answer: str) -> None:
        for command in parse_commands(answer):
            if command.id in self._seen:
                continue
            try:
                self._seen.add(command.id)
                if self.store.job_offer(command):
                    log.info("portal asks for a level-%d diagnostic (%s) of %s", command.level, command.id,
                             ", ".join(command.gpus) if command.gpus else "every GPU")  # fmt: skip
                    self.wake_runner.set()
            except sqlite3.Error:
                # It will be offered again with the next answer.
                self._seen.discard(command.id)
                log.exception("cannot keep diagnose command %s", command.id)

    def start(self, stop: threading.Event) -> None:
        self.recover()
        for name, target in (("diag-runner", self.run_runner), ("diag-reporter", self.run_reporter)):
            thread = threading.Thread(target=target, args=(stop,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def join(self, timeout: float) -> None:
        self.wake_runner.set()
        self.wake_reporter.set()
        for thread in self._threads:
            thread.join(timeout=timeout)

    def recover(self) -> None:
        """Diagnostics a stop or crash cut short: run again (once), else report the failure."""
        for command, started_at, runs in self.store.jobs_interrupted():
            if runs < MAX_RUNS:
                log.warning("diagnostic %s was cut short by a stop or crash; running it again", command.id)
                self.store.job_requeue(command.id)
                continue
            log.error("diagnostic %s was cut short %d times; reporting it failed", command.id, runs)
            info = f"the agent stopped or crashed during this diagnostic {runs} times; it never finished"
            error = check(f"diagnose level {command.level}", "Deployment", "fail", info)
            document = {
                "started_at": rfc3339(started_at),
                "finished_at": rfc3339(self._clock()),
                "tool": "dcgmi" if self.runner.dcgmi else "nvml",
                "tool_version": None,
                "driver_version": self.runner.device.system_info().get("driver_version"),
                "gpus": [
                    gpu_entry(target.uuid, [error])
                    for target in resolve_targets(self.runner.device, command.gpus, self._known())
                ],
            }
            self.store.job_finish(command.id, document)
        self.wake_reporter.set()

    def _known(self) -> dict[int, str] | None:
        return self.runner.known_uuids() if self.runner.known_uuids else None

    # the runner thread
    def run_runner(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                command = self.store.job_next()
                if command is None:
                    self.wake_runner.wait(self._idle_wait_s)
                    self.wake_runner.clear()
                    continue
                self.run_one(command, stop)
            except Exception:
                log.exception("running a diagnostic failed")
                stop.wait(5.0)

    def run_one(self, command: Command, stop: threading.Event | None = None) -> dict[str, Any] | None:
        first_run = self.store.job_runs(command.id) == 0
        started = self._clock()
        started_report = {"started_at": rfc3339(started)}
        if first_run:
            # Said at once, so the portal stops offering it; queued if the portal cannot be reached.
            answer = self._post(command.id, started_report)
            outcome = report_outcome(answer)
            if outcome == "final":
                log.error("portal refused to start diagnostic %s (HTTP %s: %s); not running it",
                          command.id, answer.status, answer.detail[:300])  # fmt: skip
                self.store.job_finish(command.id, None)
                return None
            self.store.job_start(command.id, started, None if outcome == "done" else started_report)
            if outcome != "done":
                self.wake_reporter.set()
        else:
            self.store.job_start(command.id, started, None)
        self.running = command.id
        log.info("diagnostic %s: level %d started", command.id, command.level)
        try:
            document = self.runner.run(command.level, command.gpus, stop=stop, started_at=started)
        except Interrupted:
            # Left 'running', so the next start runs it again.
            log.warning("diagnostic %s stopped with the agent; it runs again at the next start", command.id)
            return None
        finally:
            self.running = None
        self.store.job_finish(command.id, document)
        self.finished += 1
        log.info("diagnostic %s finished: %s", command.id,
                 ", ".join(f"{g['uuid']} {g['result']}" for g in document["gpus"]) or "no GPU")  # fmt: skip
        self.wake_reporter.set()
        return document

    def _post(self, diagnostic_id: str, body: dict[str, Any]) -> SendResult:
        path = RESULT_PATH.format(id=diagnostic_id)
        return self._sender.post_json(path, json.dumps(body, separators=(",", ":")).encode())

    # the reporter thread
    def run_reporter(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                delay = self.report_step()
            except Exception:
                log.exception("reporting a diagnostic failed")
                delay = self._backoff.next_delay()
            if delay is None:
                self.wake_reporter.wait(self._idle_wait_s)
                self.wake_reporter.clear()
            elif delay > 0:
                stop.wait(delay)

    def report_step(self) -> float | None:
        """Send the oldest report once. None: nothing to send; else seconds before the next."""
        item = self.store.report_next()
        if item is None:
            return None
        report_id, diagnostic_id, kind, body = item
        result = self._sender.post_json(RESULT_PATH.format(id=diagnostic_id), body)
        outcome = report_outcome(result)
        if outcome == "done":
            self.store.report_done(report_id)
            self._backoff.reset()
            self._hold_backoff.reset()
            log.info("diagnostic %s: %s reported (HTTP %s)", diagnostic_id, kind, result.status)
            return 0.0
        if outcome == "final":
            self.store.report_done(report_id)
            log.error("diagnostic %s: the portal refused the %s report with HTTP %s (%s); dropped",
                      diagnostic_id, kind, result.status, result.detail[:300])  # fmt: skip
            return 0.0
        if outcome == "reject":
            self.store.report_refused(report_id, status=result.status or 0, reason=result.detail)
            log.error("PORTAL REJECTED the %s report of diagnostic %s with HTTP %s: %s; set aside in %s "
                      "(table 'report_refused')", kind, diagnostic_id, result.status, result.detail[:500],
                      self.store.path)  # fmt: skip
            return 0.0
        backoff = self._hold_backoff if outcome == "hold" else self._backoff
        delay = backoff.next_delay(result.retry_after)
        log.log(logging.ERROR if outcome == "hold" or backoff.failures > 3 else logging.WARNING,
                "diagnostic %s: sending the %s report failed (%s %s); kept, retry in %.1f s",
                diagnostic_id, kind, result.status or "no answer", result.detail[:200], delay)  # fmt: skip
        return delay
