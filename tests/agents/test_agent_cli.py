"""The gpu-fleet-agent command: --version, run (the daemon's flags), enrol, install-service, doctor,
against a small stand-in portal on 127.0.0.1 (NVML is the stand-in pynvml)."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import os
import stat
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents import __version__
from agents.cli import main
from agents.config import token_location
from agents.push import Sender

REPO = Path(__file__).resolve().parents[2]


class MiniPortal:
    """/healthz, /api/v1/enrol (code 'good' only) and a dry-run /api/v1/ingest for token 'gfh_ok'."""

    def __init__(self) -> None:
        self.skew_s = 0.0
        self.enrolments: list[dict] = []
        self.collected: list[str | None] = []
        self.rotations = 0
        self.sent_with: list[str | None] = []
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def redirected(self):
                # /moved/...: a portal that moved (or a proxy) answers 302 to a page that records
                # whatever Authorization header reaches it.
                if self.path.startswith("/moved/"):
                    self.send_response(302)
                    self.send_header("Location", "/collect")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                if self.path == "/collect":
                    portal.collected.append(self.headers.get("Authorization"))
                    self.answer(200, {"status": "ok"})
                    return True
                return False

            def do_GET(self):
                if not self.redirected():
                    self.answer(200 if self.path == "/healthz" else 404, {"status": "ok"})

            def do_POST(self):
                if self.redirected():
                    return
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                body = json.loads(raw or b"{}")
                if self.path == "/api/v1/host-tokens/rotate":
                    if self.headers.get("Authorization") != "Bearer gfh_ok":
                        return self.answer(401, {"error": "missing, unknown or revoked host token"})
                    portal.rotations += 1
                    return self.answer(201, {"hostname": "h1", "token": "gfh_new", "prefix": "gfh_new",
                                             "replaces": "gfh_ok"})  # fmt: skip
                if self.path == "/api/v1/ingest" and not self.headers.get("X-Dry-Run"):
                    portal.sent_with.append(self.headers.get("Authorization"))
                    return self.answer(202, {"accepted": 0, "duplicate": False})
                if self.path == "/api/v1/enrol":
                    if body.get("code") != "good":
                        detail = [{"loc": "code", "msg": "unknown code"}]
                        return self.answer(400, {"error": "unknown enrolment code", "detail": detail})
                    portal.enrolments.append(body)
                    return self.answer(201, {"hostname": body["hostname"], "token": "gfh_ok", "ingest_url": "x"})
                if self.headers.get("Authorization") != "Bearer gfh_ok":
                    return self.answer(401, {"error": "missing, unknown or revoked host token"})
                now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=portal.skew_s)
                return self.answer(200, {"accepted": 0, "duplicate": False, "dry_run": True, "hostname": "h1",
                                         "time": now.isoformat().replace("+00:00", "Z")})  # fmt: skip

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def portal():
    server = MiniPortal()
    yield server
    server.stop()


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"gpu-fleet-agent {__version__}"


def test_run_subcommand_and_python_m_agents_take_the_daemons_flags():
    for command in (["run", "--simulate", "2", "--once", "--stdout"], ["--simulate", "2", "--once", "--stdout"]):
        result = subprocess.run(
            [sys.executable, "-m", "agents", *command], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert len(json.loads(result.stdout)["gpus"]) == 2


def test_enrol_stores_url_and_token_mode_0600(portal, tmp_path, capsys):
    assert main(["enrol", portal.url, "good", "--hostname", "gpu-9", "--config-dir", str(tmp_path)]) == 0
    path = tmp_path / "agent.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = tomllib.loads(path.read_text())
    assert stored == {"url": portal.url, "token": "gfh_ok", "hostname": "gpu-9"}
    assert portal.enrolments == [{"code": "good", "hostname": "gpu-9"}]


def test_enrol_reads_the_code_from_the_environment_or_stdin_never_needing_argv(portal, tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_FLEET_ENROL_CODE", "good")
    assert main(["enrol", portal.url, "--hostname", "gpu-env", "--config-dir", str(tmp_path / "a")]) == 0
    monkeypatch.delenv("GPU_FLEET_ENROL_CODE")
    monkeypatch.setattr("sys.stdin", io.StringIO("good\n"))
    assert main(["enrol", portal.url, "--hostname", "gpu-stdin", "--config-dir", str(tmp_path / "b")]) == 0
    assert [e["hostname"] for e in portal.enrolments] == ["gpu-env", "gpu-stdin"]
    assert all(e["code"] == "good" for e in portal.enrolments)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["enrol", portal.url, "--config-dir", str(tmp_path / "c")]) == 2
    assert not (tmp_path / "c").exists()


def test_enrol_redeemed_stores_the_answer_from_stdin_and_sends_nothing(portal, tmp_path, monkeypatch, capsys):
    answer = {"hostname": "gpu-7", "token": "gfh_fromstdin", "ingest_url": "x"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(answer)))
    assert main(["enrol", portal.url, "--redeemed", "--config-dir", str(tmp_path)]) == 0
    path = tmp_path / "agent.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tomllib.loads(path.read_text()) == {"url": portal.url, "token": "gfh_fromstdin", "hostname": "gpu-7"}
    assert portal.enrolments == [] and list(tmp_path.iterdir()) == [path]  # no temporary file left
    monkeypatch.setattr("sys.stdin", io.StringIO('{"error": "unknown enrolment code"}'))
    assert main(["enrol", portal.url, "--redeemed", "--config-dir", str(tmp_path / "x")]) == 2
    assert "not the portal's enrolment answer" in capsys.readouterr().err


def test_enrol_with_a_bad_code_says_why_and_writes_nothing(portal, tmp_path, capsys):
    assert main(["enrol", portal.url, "bad", "--config-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "HTTP 400" in err and "code: unknown code" in err
    assert not (tmp_path / "agent.toml").exists()


def test_enrol_refuses_plain_http_to_another_machine(tmp_path, capsys):
    assert main(["enrol", "http://portal.lab", "good", "--config-dir", str(tmp_path)]) == 2
    assert "--insecure-http" in capsys.readouterr().err


def fake_tools(tmp_path: Path) -> Path:
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("systemctl", "useradd", "chown"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\n')
        tool.chmod(0o755)
    return bin_dir


def test_install_service_writes_and_enables_the_unit(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "etc/gpu-fleet-agent").mkdir(parents=True)
    (root / "etc/gpu-fleet-agent/agent.toml").write_text('url = "https://p"\ntoken = "t"\n')
    monkeypatch.setenv("PATH", f"{fake_tools(tmp_path)}:{os.environ['PATH']}")
    assert main(["install-service", "--root", str(root), "--user", "nobody-gfa-test", "--executable", "/x/gfa"]) == 0
    unit = (root / "etc/systemd/system/gpu-fleet-agent.service").read_text()
    assert "User=nobody-gfa-test" in unit and "ExecStart=/x/gfa run --config /etc/gpu-fleet-agent/agent.toml" in unit
    assert (root / "var/lib/gpu-fleet-agent").is_dir()
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[0].startswith("useradd --system") and calls[0].endswith("nobody-gfa-test")
    assert calls[-2:] == ["systemctl daemon-reload", "systemctl enable --now gpu-fleet-agent"]


def test_install_service_without_enrolment_stops_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_tools(tmp_path)}:{os.environ['PATH']}")
    assert main(["install-service", "--root", str(tmp_path / "root")]) == 1
    assert "enrol URL` first" in capsys.readouterr().err
    assert not (tmp_path / "calls.log").exists()


def doctor(portal, tmp_path, *extra):
    return main(["doctor", "--url", portal.url, "--spool-dir", str(tmp_path / "spool"), *extra])


def test_doctor_all_good(portal, tmp_path, fake_nvml, capsys):
    assert doctor(portal, tmp_path, "--token", "gfh_ok") == 0
    lines = capsys.readouterr().out.splitlines()
    names = ("nvml", "portal", "token", "clock", "spool", "diagnostics")
    assert [line.split(":")[0] for line in lines] == [f"ok   {name}" for name in names]
    assert "2 GPU(s)" in lines[0]


def test_doctor_says_which_tool_runs_diagnostics(portal, tmp_path, fake_nvml, capsys):
    fake = tmp_path / "dcgmi"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert doctor(portal, tmp_path, "--token", "gfh_ok", "--dcgmi", str(fake)) == 0
    assert f"ok   diagnostics: DCGM's {fake}: levels 1-3" in capsys.readouterr().out
    assert doctor(portal, tmp_path, "--token", "gfh_ok", "--dcgmi", "none") == 0
    assert "DCGM off" in capsys.readouterr().out
    assert doctor(portal, tmp_path, "--token", "gfh_ok", "--dcgmi", str(tmp_path / "missing")) == 1
    assert "FAIL diagnostics: --dcgmi" in capsys.readouterr().out


def test_doctor_fails_on_a_bad_token_a_skewed_clock_or_an_unwritable_spool(portal, tmp_path, fake_nvml, capsys):
    assert doctor(portal, tmp_path, "--token", "gfh_revoked") == 1
    assert "FAIL token: refused with HTTP 401" in capsys.readouterr().out
    portal.skew_s = 900
    assert doctor(portal, tmp_path, "--token", "gfh_ok") == 1
    assert "FAIL clock: -900" in capsys.readouterr().out
    portal.skew_s = 0
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["doctor", "--url", portal.url, "--token", "gfh_ok", "--spool-dir", str(blocker / "spool")]) == 1
    assert "FAIL spool" in capsys.readouterr().out


def test_doctor_follows_no_redirect_so_the_token_stays_with_the_portal(portal, tmp_path, fake_nvml, capsys):
    result = main(["doctor", "--url", portal.url + "/moved", "--token", "gfh_ok", "--spool-dir", str(tmp_path)])
    assert result == 1
    out = capsys.readouterr().out
    assert "FAIL portal" in out and "answered 302" in out
    assert "FAIL token: refused with HTTP 302" in out and "not followed" in out
    assert portal.collected == []  # neither the check of /healthz nor the token's went to /collect


def test_enrol_follows_no_redirect(portal, tmp_path, capsys):
    assert main(["enrol", portal.url + "/moved", "good", "--config-dir", str(tmp_path)]) == 1
    assert "HTTP 302" in capsys.readouterr().err
    assert portal.collected == [] and not (tmp_path / "agent.toml").exists()


def test_doctor_fails_without_gpus_or_portal(tmp_path, capsys):
    import pynvml

    pynvml.fake_reset(count=0)
    assert main(["doctor", "--url", "http://127.0.0.1:9", "--token", "t", "--spool-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL nvml" in out and "FAIL portal" in out and "FAIL token" in out


def test_the_package_depends_on_nvidia_ml_py_only_at_the_pinned_version():
    project = tomllib.loads((REPO / "agents/pyproject.toml").read_text())["project"]
    pins = [line for line in (REPO / "agents/requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    assert project["dependencies"] == pins and pins[0].startswith("nvidia-ml-py==")
    served = (REPO / "agents/requirements-dist.txt").read_text()
    assert all(f"{pin} \\\n    --hash=sha256:" in served for pin in pins)  # /agent/ serves the same version, by hash
    assert project["scripts"] == {"gpu-fleet-agent": "agents.cli:main"} and project["name"] == "gpu-fleet-agent"


def test_rotate_token_rewrites_the_config_file_whole_and_mode_0600(portal, tmp_path, capsys):
    config = tmp_path / "agent.toml"
    config.write_text(f'# made by enrol\nurl = "{portal.url}"\ntoken = "gfh_ok"\nhostname = "h1"\ninterval = 5\n')
    config.chmod(0o600)
    assert main(["rotate-token", "--config", str(config)]) == 0, capsys.readouterr().err
    assert portal.rotations == 1
    assert tomllib.loads(config.read_text()) == {"url": portal.url, "token": "gfh_new", "hostname": "h1", "interval": 5}
    assert config.read_text().startswith("# made by enrol\n") and stat.S_IMODE(config.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["agent.toml"]  # no temporary file left behind
    assert "revokes the old one (gfh_ok…)" in capsys.readouterr().out


def test_rotate_token_rewrites_a_token_file(portal, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("gfh_ok\n")
    assert main(["rotate-token", "--url", portal.url, "--token-file", str(token_file)]) == 0
    assert token_file.read_text() == "gfh_new\n" and stat.S_IMODE(token_file.stat().st_mode) == 0o600


def test_rotate_token_refuses_what_it_cannot_rewrite_before_asking_the_portal(portal, tmp_path, capsys, monkeypatch):
    assert main(["rotate-token", "--url", portal.url, "--token", "gfh_ok"]) == 2
    assert "cannot rewrite" in capsys.readouterr().err
    monkeypatch.setenv("GPU_AGENT_TOKEN", "gfh_ok")
    assert main(["rotate-token", "--url", portal.url]) == 2
    monkeypatch.delenv("GPU_AGENT_TOKEN")
    config = tmp_path / "agent.toml"
    config.write_text(f'url = "{portal.url}"\ntoken = "gfh_ok"\nscenario = """\ntoken = "x"\n"""\n')
    assert main(["rotate-token", "--config", str(config)]) == 2  # two `token =` lines: which one?
    assert "no single `token = ...` line" in capsys.readouterr().err
    assert portal.rotations == 0


def test_rotate_token_refused_by_the_portal_changes_nothing(portal, tmp_path, capsys):
    config = tmp_path / "agent.toml"
    config.write_text(f'url = "{portal.url}"\ntoken = "gfh_revoked"\n')
    before = config.read_text()
    assert main(["rotate-token", "--config", str(config)]) == 1
    assert "HTTP 401" in capsys.readouterr().err and config.read_text() == before


def test_the_sender_picks_up_a_rotated_token_from_its_file(portal, tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text(f'url = "{portal.url}"\ntoken = "gfh_ok"\n')
    argv = ["--config", str(config)]
    sender = Sender(url=portal.url, token="gfh_ok", token_source=token_location(argv, environ={}))
    assert sender.send(b"{}").outcome == "done"
    assert main(["rotate-token", *argv]) == 0
    assert sender.send(b"{}").outcome == "done"
    assert portal.sent_with == ["Bearer gfh_ok", "Bearer gfh_new"]
