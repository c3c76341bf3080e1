"""Run a few processes together and keep them running: the small lab's `manage.py run`.

Each child runs in its own session, so Ctrl-C reaches only the supervisor, which then stops the
children in the reverse order of their start (SIGTERM, then SIGKILL after a grace period). A
child that exits is started again, unless it keeps exiting (more than `max_restarts` times within
`window_s`): then everything stops with a message that names it. On Linux every child also gets
SIGTERM if the supervisor itself dies without cleaning up (kill -9).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Stop(Exception):
    """Raised in the supervisor's main loop by SIGTERM or SIGINT."""


class ChildFailed(Exception):
    """A child kept exiting; the message says which one and how."""


@dataclasses.dataclass
class Child:
    name: str
    command: list[str]
    env: dict[str, str] | None = None
    log: Path | None = None  # None: the child writes to the supervisor's own stdout/stderr
    cwd: Path | None = None
    process: subprocess.Popen | None = None
    exits: collections.deque = dataclasses.field(default_factory=collections.deque)

    def start(self) -> None:
        out = open(self.log, "ab") if self.log else None  # noqa: SIM115 - the child keeps it open
        try:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        finally:
            if out:
                out.close()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    def __init__(
        self,
        *,
        say: Callable[[str], None] = print,
        max_restarts: int = 3,
        window_s: float = 60.0,
        stop_timeout_s: float = 15.0,
    ) -> None:
        self.children: list[Child] = []
        self.say = say
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.stop_timeout_s = stop_timeout_s
        self.stopping = False

    def start(self, child: Child) -> Child:
        child.start()
        self.children.append(child)
        return child

    @contextlib.contextmanager
    def signals(self):
        """SIGTERM and SIGINT raise Stop in the main loop (and in whatever runs before it)."""

        def stop(signum, frame):
            if not self.stopping:
                self.stopping = True
                raise Stop(signal.Signals(signum).name)

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def check(self) -> None:
        """Restart children that exited; raise ChildFailed for one that keeps exiting."""
        now = time.monotonic()
        for child in self.children:
            if child.running:
                continue
            code = child.process.returncode
            while child.exits and child.exits[0] < now - self.window_s:
                child.exits.popleft()
            child.exits.append(now)
            if len(child.exits) > self.max_restarts:
                how = (
                    f"exited {len(child.exits)} times within {self.window_s:.0f} s (last exit status {code})"
                    if self.max_restarts
                    else f"exited with status {code}"
                )
                raise ChildFailed(
                    f"{child.name} {how}; stopping everything"
                    + (f" — its output: {child.log}" if child.log else " — see its output above")
                )
            self.say(
                f"{child.name} exited with status {code}; starting it again"
                + (f" (its output: {child.log})" if child.log else "")
            )
            child.start()

    def run_forever(self, poll_s: float = 0.5) -> None:
        while True:
            self.check()
            time.sleep(poll_s)

    def stop(self) -> None:
        """Stop every child: SIGTERM in reverse start order, SIGKILL for what is left after the
        grace period. Waits for all of them, so nothing is left behind (a second Ctrl-C meanwhile
        is ignored rather than cutting this short)."""
        self.stopping = True
        for child in reversed(self.children):
            if child.running:
                with contextlib.suppress(ProcessLookupError):
                    child.process.terminate()
        deadline = time.monotonic() + self.stop_timeout_s
        for child in reversed(self.children):
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{child.name} did not stop within {self.stop_timeout_s:.0f} s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_answers(url: str, *, check: Callable[[], None], timeout_s: float = 60.0) -> None:
    """Poll url until it answers 200, calling check() in between (Supervisor.check, or anything
    that raises when the process being waited for has died): "start the portal and wait for it"
    in `manage.py run`, the tests and the benchmarks."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise ChildFailed(f"the portal did not answer at {url} within {timeout_s:.0f} s")


@contextlib.contextmanager
def serving(
    name: str,
    command: list[str],
    *,
    url: str,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    cwd: Path | None = None,
    timeout_s: float = 60.0,
    stop_timeout_s: float = 15.0,
) -> Iterator[subprocess.Popen]:
    """Start one server process, wait until url answers, run the block, stop the process: "start
    the portal and wait for it" for the tests and the benchmarks. The process is not restarted: if
    it exits before it answers, or does not answer within timeout_s, ChildFailed says so (naming
    its log). After the block it gets SIGTERM, then SIGKILL after stop_timeout_s."""
    supervisor = Supervisor(max_restarts=0, stop_timeout_s=stop_timeout_s)
    try:
        child = supervisor.start(Child(name, command, env, log, cwd))
        wait_until_answers(url, check=supervisor.check, timeout_s=timeout_s)
        yield child.process
    finally:
        supervisor.stop()
