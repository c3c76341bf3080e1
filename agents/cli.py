"""`gpu-fleet-agent`: run (the daemon, today's flags), enrol, doctor, diagnose, install-service, rotate-token,
--version.

Without a subcommand the arguments are the daemon's (`python -m agents --simulate 2 ...`), so the
demo, the tests and existing units keep working.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

from agents import __version__
from agents.config import ConfigError, check_url
from agents.push import portal_opener

PROG = "gpu-fleet-agent"
DEFAULT_CONFIG_DIR = "/etc/gpu-fleet-agent"
SERVICE_NAME = "gpu-fleet-agent"
SERVICE_USER = "gpu-fleet-agent"
STATE_DIR = "/var/lib/gpu-fleet-agent"
SUBCOMMANDS = ("run", "enrol", "doctor", "diagnose", "install-service", "rotate-token")

# The agent's one systemd unit: `install-service` writes it (install.sh runs that), `install-service
# --print-unit` shows it. The state directory is the spool; systemd makes it, owned by the user.
UNIT = """\
[Unit]
Description=GPU Fleet Portal agent (NVML telemetry to the portal)
After=network-online.target nvidia-persistenced.service
Wants=network-online.target

[Service]
Type=simple
User={user}
Group={user}
ExecStart={executable} run --config {config} --spool-dir {state}
StateDirectory={state_name}
StateDirectoryMode=0750
Restart=on-failure
RestartSec=10
# SIGTERM makes the agent finish its current step; everything unsent stays in the spool.
KillSignal=SIGTERM
TimeoutStopSec=30
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectControlGroups=yes

[Install]
WantedBy=multi-user.target
"""


def unit_text(*, user: str = SERVICE_USER, executable: str, config: str = DEFAULT_CONFIG_DIR + "/agent.toml") -> str:
    return UNIT.format(
        user=user, executable=executable, config=config, state=STATE_DIR, state_name=STATE_DIR.rsplit("/", 1)[-1]
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:
        print(f"{PROG} {__version__}")
        return 0
    if not argv or argv[0] not in SUBCOMMANDS:
        from agents.daemon import main as run_main

        return run_main(argv)
    command, rest = argv[0], argv[1:]
    if command == "run":
        from agents.daemon import main as run_main

        return run_main(rest)
    if command == "enrol":
        return enrol(rest)
    if command == "install-service":
        return install_service(rest)
    if command == "rotate-token":
        return rotate_token(rest)
    if command == "diagnose":
        return diagnose(rest)
    from agents.doctor import main as doctor_main

    return doctor_main(rest)


def fail(message: str, code: int = 1) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


CODE_ENV = "GPU_FLEET_ENROL_CODE"


def _refusal(raw: bytes) -> str:
    try:
        body = json.loads(raw)
        problems = "; ".join(f"{d.get('loc')}: {d.get('msg')}" for d in body.get("detail") or [])
        return body.get("error", "") + (f" ({problems})" if problems else "")
    except (ValueError, AttributeError):
        return "not the portal's answer (a wrong URL, or a proxy)"


def _read_code() -> str:
    """The code from GPU_FLEET_ENROL_CODE, else the first line of stdin: never from the command
    line, which every user of the machine can read in /proc/*/cmdline."""
    code = os.environ.get(CODE_ENV, "").strip()
    if not code and not sys.stdin.isatty():
        code = sys.stdin.readline().strip()
    elif not code:
        import getpass

        code = getpass.getpass("enrolment code: ").strip()
    return code


def enrol(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} enrol",
        description=f"Exchange an enrolment code for a host token. The code is read from {CODE_ENV} or stdin "
        "(a prompt on a terminal), never from the command line.",
    )
    parser.add_argument("url", help="the portal's base URL, e.g. https://portal.example.com")
    parser.add_argument(
        "code", nargs="?", default=None,
        help=f"deprecated: a code here is visible to every user of this machine while it runs; use {CODE_ENV} "
        "or stdin",
    )  # fmt: skip
    parser.add_argument("--hostname", default=None, help="host name to enrol as (default: this machine's)")
    parser.add_argument(
        "--config-dir", default=DEFAULT_CONFIG_DIR, help=f"where agent.toml goes ({DEFAULT_CONFIG_DIR})"
    )
    parser.add_argument("--ca-file", default=None, help="PEM file of extra CA certificates to trust")
    parser.add_argument("--insecure-http", action="store_true", help="allow an http:// portal that is not loopback")
    parser.add_argument(
        "--redeemed", action="store_true",
        help="stdin holds the portal's answer to POST /api/v1/enrol (install.sh redeems the code itself): "
        "store its token, send nothing",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    url = args.url.rstrip("/")
    try:
        check_url(url, insecure_http=args.insecure_http)
    except ConfigError as exc:
        return fail(str(exc), 2)
    if args.redeemed:
        try:
            answer = json.loads(sys.stdin.read(100_000))
            if not isinstance(answer.get("token"), str) or not isinstance(answer.get("hostname"), str):
                raise ValueError("no token or hostname")
        except (ValueError, AttributeError) as exc:
            return fail(f"--redeemed: stdin is not the portal's enrolment answer ({exc})", 2)
    else:
        answer = _exchange(url, args)
        if isinstance(answer, int):
            return answer
    path = write_config(
        Path(args.config_dir), url=url, token=answer["token"], hostname=answer["hostname"],
        insecure_http=args.insecure_http, ca_file=os.path.abspath(args.ca_file) if args.ca_file else None,
    )  # fmt: skip
    print(f"enrolled {answer['hostname']} at {url}; token stored in {path} (mode 0600)")
    return 0


def _exchange(url: str, args) -> dict | int:
    if args.code:
        print(f"{PROG}: warning: a code on the command line is visible to every user of this machine; set "
              f"{CODE_ENV} or give it on stdin", file=sys.stderr)  # fmt: skip
    code = args.code.strip() if args.code else _read_code()
    if not code:
        return fail(f"no enrolment code: set {CODE_ENV} or give it on stdin", 2)
    hostname = args.hostname or socket.gethostname()
    request = urllib.request.Request(
        url + "/api/v1/enrol",
        data=json.dumps({"code": code, "hostname": hostname}).encode(),
        headers={"Content-Type": "application/json", "User-Agent": f"{PROG}/{__version__}"},
        method="POST",
    )
    try:
        with portal_opener(url, args.ca_file).open(request, timeout=args.timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return fail(f"enrolment refused, HTTP {exc.code}: {_refusal(exc.read(4000))}")
    except (OSError, ValueError) as exc:
        return fail(f"cannot reach the portal at {url}: {exc}")


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically, mode 0600 from the start (the secret is never readable
    by others, not even briefly), keeping the owner of the file it replaces (the service's user)."""
    try:
        before = path.stat()
    except FileNotFoundError:
        before = None
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        if before is not None and (before.st_uid, before.st_gid) != (os.getuid(), os.getgid()):
            os.chown(temporary, before.st_uid, before.st_gid)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_config(
    config_dir: Path, *, url: str, token: str, hostname: str, insecure_http: bool = False, ca_file: str | None = None
) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"url = {toml_string(url)}", f"token = {toml_string(token)}", f"hostname = {toml_string(hostname)}"]
    if insecure_http:
        lines.append("insecure_http = true")
    if ca_file:
        lines.append(f"ca_file = {toml_string(ca_file)}")
    path = config_dir / "agent.toml"
    write_private(path, "\n".join(lines) + "\n")
    return path


def _run(command: list[str]) -> None:
    subprocess.run(command, check=True)


def install_service(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} install-service",
        description="Create the system user and state directory, write and enable the systemd unit, start it.",
    )
    parser.add_argument("--root", default="/", help="install under this directory (a test or an image build)")
    parser.add_argument("--user", default=SERVICE_USER)
    parser.add_argument("--config-dir", default=DEFAULT_CONFIG_DIR, help="where enrol put agent.toml")
    parser.add_argument("--executable", default=None, help="the gpu-fleet-agent to run (default: this one)")
    parser.add_argument("--no-start", action="store_true", help="enable the unit but do not start it now")
    parser.add_argument("--print-unit", action="store_true", help="print the unit it would write, change nothing")
    args = parser.parse_args(argv)
    root = Path(args.root)

    def under(path: str) -> Path:
        return root / path.lstrip("/")

    config = Path(args.config_dir) / "agent.toml"
    executable = args.executable or shutil.which(PROG) or str(Path(sys.executable).with_name(PROG))
    if args.print_unit:
        print(unit_text(user=args.user, executable=executable, config=str(config)), end="")
        return 0
    if not under(str(config)).exists():
        return fail(f"{under(str(config))} is missing: run `{PROG} enrol URL` first")
    try:
        try:
            pwd.getpwnam(args.user)
        except KeyError:
            _run(["useradd", "--system", "--home-dir", STATE_DIR, "--no-create-home", "--shell", "/usr/sbin/nologin",
                  args.user])  # fmt: skip
        state = under(STATE_DIR)
        state.mkdir(parents=True, exist_ok=True)
        os.chmod(state, 0o750)
        _run(["chown", f"{args.user}:", str(state), str(under(str(config)))])
        unit = under(f"/etc/systemd/system/{SERVICE_NAME}.service")
        unit.parent.mkdir(parents=True, exist_ok=True)
        unit.write_text(unit_text(user=args.user, executable=executable, config=str(config)))
        _run(["systemctl", "daemon-reload"])
        _run(["systemctl", "enable", *([] if args.no_start else ["--now"]), SERVICE_NAME])
    except (OSError, subprocess.CalledProcessError) as exc:
        return fail(f"install-service failed: {exc}")
    print(
        f"{SERVICE_NAME}.service installed{'' if args.no_start else ' and started'}; logs: journalctl -u {SERVICE_NAME}"
    )
    return 0


ROTATE_PATH = "/api/v1/host-tokens/rotate"
_TOKEN_LINE = re.compile(r"^[ \t]*token[ \t]*=.*$", re.MULTILINE)


def _with_token(config_text: str, token: str) -> str:
    """The config file's text with its `token = ...` line holding `token`, nothing else changed."""
    if len(_TOKEN_LINE.findall(config_text)) != 1:
        raise ValueError("the config file has no single `token = ...` line to replace")
    text = _TOKEN_LINE.sub(lambda _: f"token = {toml_string(token)}", config_text)
    before, after = tomllib.loads(config_text), tomllib.loads(text)
    if after.get("token") != token or {**before, "token": token} != after:
        raise ValueError("rewriting the `token` line would change more than the token")
    return text


def rotate_token(argv: list[str]) -> int:
    """A new host token from the portal, written where the agent reads its token (the config file
    or --token-file) whole and renamed into place, mode 0600. The running agent notices the file
    changed and sends with the new token; the portal revokes the old one at the first batch."""
    from agents.config import load_config, token_location
    from agents.push import INGEST_PATH, read_token

    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: {PROG} rotate-token [--config FILE] [--token-file FILE] [any daemon flag]\n\n"
              f"{rotate_token.__doc__}")  # fmt: skip
        return 0
    try:
        config = load_config(argv)
        location = token_location(argv)
    except ConfigError as exc:
        return fail(str(exc), 2)
    if location is None:
        return fail("the token comes from --token or GPU_AGENT_TOKEN, which rotate-token cannot rewrite: keep it in "
                    "the config file (token = ...) or a --token-file", 2)  # fmt: skip
    kind, path = location
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
        if kind == "config":
            _with_token(text, "gfh_check")  # refuse before the portal issues anything
        elif read_token(kind, path) != config.token:
            raise ValueError("it does not hold the token in use")
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        return fail(f"cannot rewrite {path}: {exc}", 2)
    if not os.access(target.parent, os.W_OK) or not os.access(target, os.W_OK):
        return fail(f"cannot write {path} (or a new file beside it): run as root", 2)
    base = config.url.rstrip("/").removesuffix(INGEST_PATH)
    request = urllib.request.Request(
        base + ROTATE_PATH, data=b"{}", method="POST",
        headers={"Authorization": f"Bearer {config.token}", "Content-Type": "application/json",
                 "User-Agent": f"{PROG}/{__version__}"},
    )  # fmt: skip
    try:
        with portal_opener(base, config.ca_file).open(request, timeout=config.timeout) as response:
            answer = json.loads(response.read())
        new = answer["token"]
    except urllib.error.HTTPError as exc:
        return fail(f"rotation refused, HTTP {exc.code}: {_refusal(exc.read(4000))}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return fail(f"cannot reach the portal at {base}: {exc}")
    try:
        write_private(target, _with_token(text, new) if kind == "config" else new + "\n")
    except (OSError, ValueError) as exc:
        kept = "the old token stays valid until a batch arrives with the new one: fix the cause and rotate again"
        return fail(f"the portal issued a new token but writing {path} failed ({exc}); {kept}")
    print(f"new token {answer.get('prefix')}… stored in {path} (mode 0600); the running agent sends with it from its "
          f"next batch, and the portal then revokes the old one ({answer.get('replaces')}…)")  # fmt: skip
    return 0


def _diagnose_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} diagnose",
        description="Run a diagnostic on this host's GPUs: dcgmi diag -r LEVEL where DCGM is installed, else "
        "the agent's own NVML checks (level 1; levels 2-3 are skipped without DCGM).",
    )
    parser.add_argument("--level", type=int, choices=(1, 2, 3), required=True)
    parser.add_argument("--json", action="store_true", help="print the JSON document the agent would post")
    parser.add_argument("--gpu", action="append", default=None, metavar="UUID", help="only this GPU (repeatable)")
    parser.add_argument("--dcgmi", default="dcgmi", help="dcgmi name or path; 'none' for the NVML checks")
    parser.add_argument(
        "--spool-dir",
        default=None,
        help=f"the running agent's spool directory, for its XID history (default: {STATE_DIR})",
    )
    parser.add_argument("--simulate", type=int, default=0, metavar="N", help="N simulated GPUs instead of NVML")
    parser.add_argument("--scenario", default="healthy", help="simulation scenarios, as for run")
    parser.add_argument("--scenario-at", type=float, default=0.0, metavar="HOURS",
                        help="simulation: evaluate the scenarios this many scenario hours in")  # fmt: skip
    parser.add_argument("--hostname", default=None, help="simulation: the host name the GPUs derive from")
    return parser


def _diagnose_xids(args: argparse.Namespace, device):
    """The XID history the diagnostic judges by: the running agent's (read only), else with
    --simulate the simulator's since its scenario start, else none; the device's new XIDs added."""
    import sqlite3

    from agents.commands import DIAGNOSTICS_FILE, read_xid_state
    from agents.diagnose import XidLog

    xids = None
    spool_dirs = [args.spool_dir or STATE_DIR]
    for directory in spool_dirs:
        if (Path(directory) / DIAGNOSTICS_FILE).exists():
            # The running agent's history, read only: a run by hand does not reset it.
            try:
                state = read_xid_state(directory)
            except sqlite3.Error as exc:
                print(f"{PROG}: cannot read the XID history in {directory}: {exc}", file=sys.stderr)
                break
            xids = XidLog()
            xids.load(*state)
            break
    if xids is None and args.simulate:
        xids = XidLog()  # the simulator's XIDs since its scenario start
        xids.started_at -= args.scenario_at * 3600
    if xids is not None:
        xids.add(device.take_xid_events())
    return xids


def diagnose(argv: list[str]) -> int:
    """Run a diagnostic here, as the daemon does when the portal asks; print the result. Exit 0
    when it would pass (every GPU pass or warn), 1 when not, 3 without GPUs."""
    import logging

    from agents.config import default_hostname
    from agents.daemon import EXIT_NO_DEVICE, find_dcgmi
    from agents.device import DeviceUnavailable, NvmlDeviceClient
    from agents.diagnose import Runner, format_human, overall
    from agents.simulate import SimulatedDeviceClient, gpu_uuid, parse_scenarios

    args = _diagnose_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    if args.simulate < 0 or args.scenario_at < 0:
        return fail("--simulate and --scenario-at must not be negative", 2)
    known = None
    try:
        if args.simulate:
            hostname = args.hostname or default_hostname(simulated=True)
            device = SimulatedDeviceClient(
                count=args.simulate,
                scenarios=parse_scenarios(args.scenario),
                hostname=hostname,
                scenario_offset_s=args.scenario_at * 3600,
            )
            uuids = {index: gpu_uuid(hostname, index) for index in range(args.simulate)}

            def known() -> dict[int, str]:
                return uuids

        else:
            device = NvmlDeviceClient()
    except (DeviceUnavailable, ValueError) as exc:
        return fail(f"{exc} (no GPU here? try --simulate N)", EXIT_NO_DEVICE)
    try:
        xids = _diagnose_xids(args, device)
        runner = Runner(device=device, dcgmi=find_dcgmi(args.dcgmi), xids=xids, known_uuids=known)
        document = runner.run(args.level, args.gpu)
    finally:
        device.close()
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(format_human(document))
        print(f"diagnostic: {overall(document)}")
    return 0 if overall(document) in ("passed", "warned") else 1
