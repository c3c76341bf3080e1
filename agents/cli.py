"""`gpu-fleet-agent`: run (the daemon, today's flags), enrol, doctor, diagnose, install-service, --version.

Without a subcommand the arguments are the daemon's (`python -m agents --simulate 2 ...`), so the
demo, the tests and existing units keep working.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from agents import __version__
from agents.config import ConfigError, check_url

PROG = "gpu-fleet-agent"
DEFAULT_CONFIG_DIR = "/etc/gpu-fleet-agent"
SERVICE_NAME = "gpu-fleet-agent"
SERVICE_USER = "gpu-fleet-agent"
STATE_DIR = "/var/lib/gpu-fleet-agent"
SUBCOMMANDS = ("run", "enrol", "doctor", "diagnose", "install-service")

UNIT = """\
[Unit]
Description=GPU Fleet Portal agent (NVML telemetry to the portal)
After=network-online.target
Wants=network-online.target

[Service]
User={user}
Group={user}
ExecStart={executable} run --config {config} --spool-dir {state}
Restart=on-failure
RestartSec=10
KillSignal=SIGTERM
TimeoutStopSec=30
NoNewPrivileges=true
ProtectSystem=strict
ReadWritePaths={state}
ProtectHome=true
PrivateTmp=true

[Install]
WantedBy=multi-user.target
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:
        print(f"{PROG} {__version__}")
        return 0
    if not argv or argv[0] not in SUBCOMMANDS:
        from agents.__main__ import main as run_main

        return run_main(argv)
    command, rest = argv[0], argv[1:]
    if command == "run":
        from agents.__main__ import main as run_main

        return run_main(rest)
    if command == "enrol":
        return enrol(rest)
    if command == "install-service":
        return install_service(rest)
    if command == "diagnose":
        return diagnose(rest)
    from agents.doctor import main as doctor_main

    return doctor_main(rest)


def fail(message: str, code: int = 1) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def _opener(url: str, ca_file: str | None):
    handlers: list[urllib.request.BaseHandler] = []
    if url.startswith("https:"):
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca_file)))
    return urllib.request.build_opener(*handlers)


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def enrol(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} enrol", description="Exchange an enrolment code for a host token.")
    parser.add_argument("url", help="the portal's base URL, e.g. https://portal.example.com")
    parser.add_argument("code", help="the enrolment code an admin made on the portal's Add hosts page")
    parser.add_argument("--hostname", default=None, help="host name to enrol as (default: this machine's)")
    parser.add_argument(
        "--config-dir", default=DEFAULT_CONFIG_DIR, help=f"where agent.toml goes ({DEFAULT_CONFIG_DIR})"
    )
    parser.add_argument("--ca-file", default=None, help="PEM file of extra CA certificates to trust")
    parser.add_argument("--insecure-http", action="store_true", help="allow an http:// portal that is not loopback")
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv)
    url = args.url.rstrip("/")
    try:
        check_url(url, insecure_http=args.insecure_http)
    except ConfigError as exc:
        return fail(str(exc), 2)
    hostname = args.hostname or socket.gethostname()
    request = urllib.request.Request(
        url + "/api/v1/enrol",
        data=json.dumps({"code": args.code, "hostname": hostname}).encode(),
        headers={"Content-Type": "application/json", "User-Agent": f"{PROG}/{__version__}"},
        method="POST",
    )
    try:
        with _opener(url, args.ca_file).open(request, timeout=args.timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read(4000))
            problems = "; ".join(f"{d.get('loc')}: {d.get('msg')}" for d in body.get("detail") or [])
            message = body.get("error", "") + (f" ({problems})" if problems else "")
        except (ValueError, AttributeError):
            message = "not the portal's answer (a wrong URL, or a proxy)"
        return fail(f"enrolment refused, HTTP {exc.code}: {message}")
    except (OSError, ValueError) as exc:
        return fail(f"cannot reach the portal at {url}: {exc}")
    config_dir = Path(args.config_dir)
    config_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"url = {toml_string(url)}", f"token = {toml_string(answer['token'])}",
             f"hostname = {toml_string(answer['hostname'])}"]  # fmt: skip
    if args.insecure_http:
        lines.append("insecure_http = true")
    if args.ca_file:
        lines.append(f"ca_file = {toml_string(os.path.abspath(args.ca_file))}")
    path = config_dir / "agent.toml"
    # Created 0600 before the token is written: it is never readable by others, not even briefly.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    print(f"enrolled {answer['hostname']} at {url}; token stored in {path} (mode 0600)")
    return 0


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
    args = parser.parse_args(argv)
    root = Path(args.root)

    def under(path: str) -> Path:
        return root / path.lstrip("/")

    config = Path(args.config_dir) / "agent.toml"
    if not under(str(config)).exists():
        return fail(f"{under(str(config))} is missing: run `{PROG} enrol URL CODE` first")
    executable = args.executable or shutil.which(PROG) or str(Path(sys.executable).with_name(PROG))
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
        unit.write_text(UNIT.format(user=args.user, executable=executable, config=config, state=STATE_DIR))
        _run(["systemctl", "daemon-reload"])
        _run(["systemctl", "enable", *([] if args.no_start else ["--now"]), SERVICE_NAME])
    except (OSError, subprocess.CalledProcessError) as exc:
        return fail(f"install-service failed: {exc}")
    print(
        f"{SERVICE_NAME}.service installed{'' if args.no_start else ' and started'}; logs: journalctl -u {SERVICE_NAME}"
    )
    return 0


def diagnose(argv: list[str]) -> int:
    """Run a diagnostic here, as the daemon does when the portal asks; print the result. Exit 0
    when it would pass (every GPU pass or warn), 1 when not, 3 without GPUs."""
    import logging
    import sqlite3

    from agents.__main__ import EXIT_NO_DEVICE, find_dcgmi
    from agents.commands import DIAGNOSTICS_FILE, read_xid_state
    from agents.config import default_hostname
    from agents.device import DeviceUnavailable, NvmlDeviceClient
    from agents.diagnose import Runner, XidLog, format_human, overall
    from agents.simulate import SimulatedDeviceClient, gpu_uuid, parse_scenarios

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
        help=f"the running agent's spool directory, for its XID history (default: {STATE_DIR} "
        "or /var/lib/gpu-agent, whichever holds one)",
    )
    parser.add_argument("--simulate", type=int, default=0, metavar="N", help="N simulated GPUs instead of NVML")
    parser.add_argument("--scenario", default="healthy", help="simulation scenarios, as for run")
    parser.add_argument("--scenario-at", type=float, default=0.0, metavar="HOURS",
                        help="simulation: evaluate the scenarios this many scenario hours in")  # fmt: skip
    parser.add_argument("--hostname", default=None, help="simulation: the host name the GPUs derive from")
    args = parser.parse_args(argv)
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
        xids = None
        spool_dirs = [args.spool_dir] if args.spool_dir else [STATE_DIR, "/var/lib/gpu-agent"]
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
