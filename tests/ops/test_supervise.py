"""The supervisor behind `manage.py run`: restarts a child that exits, gives up on one that keeps
exiting with a message naming it, and leaves no child behind when stopped; `serving`, the tests'
and benchmarks' "start the portal and wait for it", on a stand-in server."""

import sys
import time
import urllib.request

import pytest

from portal.ops.supervise import Child, ChildFailed, Supervisor, free_port, serving


def _child(name: str, code: str, tmp_path) -> Child:
    return Child(name, [sys.executable, "-c", code], log=tmp_path / f"{name}.log")


def test_a_child_that_exits_is_started_again(tmp_path):
    said = []
    supervisor = Supervisor(say=said.append, max_restarts=3, window_s=60)
    marker = tmp_path / "runs"
    child = supervisor.start(_child("flaky", f"open({str(marker)!r}, 'a').write('x')", tmp_path))
    child.process.wait()
    supervisor.check()
    child.process.wait()
    assert marker.read_text() == "xx"
    assert said == [f"flaky exited with status 0; starting it again (its output: {tmp_path / 'flaky.log'})"]
    supervisor.stop()


def test_a_child_that_keeps_exiting_stops_everything_with_its_name(tmp_path):
    supervisor = Supervisor(say=lambda text: None, max_restarts=2, window_s=60)
    steady = supervisor.start(_child("steady", "import time; time.sleep(60)", tmp_path))
    supervisor.start(_child("broken", "raise SystemExit(3)", tmp_path))
    with pytest.raises(ChildFailed, match=r"broken exited 3 times within 60 s \(last exit status 3\)") as failure:
        for _ in range(100):
            supervisor.check()
            time.sleep(0.05)
    assert "broken.log" in str(failure.value)
    supervisor.stop()
    assert steady.process.poll() is not None


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path):
    supervisor = Supervisor(say=lambda text: None, stop_timeout_s=1)
    ready = tmp_path / "ready"
    code = (
        f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open({str(ready)!r}, 'w'); time.sleep(60)"
    )
    stubborn = supervisor.start(_child("stubborn", code, tmp_path))
    for _ in range(100):
        if ready.exists():
            break
        time.sleep(0.05)
    started = time.monotonic()
    supervisor.stop()
    assert stubborn.process.poll() is not None
    assert time.monotonic() - started < 5


def test_serving_waits_until_the_server_answers_and_stops_it_after_the_block(tmp_path):
    (tmp_path / "healthz").write_text("ok")
    port = free_port()
    command = [sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", str(tmp_path), str(port)]
    url = f"http://127.0.0.1:{port}/healthz"
    with serving("stand-in", command, url=url, log=tmp_path / "server.log", timeout_s=30) as process:
        assert process.poll() is None
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.read() == b"ok"
    assert process.poll() is not None


def test_serving_a_server_that_exits_fails_at_once_naming_its_log(tmp_path):
    command = [sys.executable, "-c", "raise SystemExit(4)"]
    started = time.monotonic()
    with pytest.raises(ChildFailed, match=r"broken exited with status 4; .*broken\.log"):  # noqa: SIM117
        with serving("broken", command, url=f"http://127.0.0.1:{free_port()}/", log=tmp_path / "broken.log"):
            raise AssertionError("the block must not run")
    assert time.monotonic() - started < 10
