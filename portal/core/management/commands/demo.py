"""`make demo`: migrate, seed, start the portal and a few simulated agents; Ctrl-C stops all.

Runs on the embedded defaults (SQLite, in-memory channel layer, Celery tasks in-process), so a
fresh clone needs nothing but Python.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

# (hostname, scenarios, speed): one simulated host per line, each GPU gets the next scenario.
# Rules hold conditions for minutes of the readings' own (real) timestamps, while the scenario
# clock sets how fast a fault develops: rack-a's faults build up over simulated hours (120x: a few
# real minutes, jobs a quarter of a minute long); rack-b's drifts take days (the --speed clock);
# desk-c's XIDs and silence need no compression.
SIMULATED_HOSTS = [
    ("sim-rack-a", "overheat,throttle,overclock,pcie", 120.0),
    ("sim-rack-b", "dust,fan-wear,ecc,healthy", None),
    ("sim-desk-c", "xid,silent,healthy,healthy", 1.0),
]


class Command(BaseCommand):
    help = "Run the demo: the portal on http://127.0.0.1:8000 with simulated agents pushing readings."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-agents", action="store_true", help="Start the portal only.")
        parser.add_argument(
            "--speed", type=float, default=720.0, help="Simulated seconds per real second on the drifting host."
        )

    def handle(self, *args, port, no_agents, speed, **options):
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo")
        base_url = f"http://127.0.0.1:{port}"
        children: list[subprocess.Popen] = []
        log_dir = Path(settings.VAR_DIR) / "demo-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        try:
            children.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "daphne",
                        "-b",
                        "127.0.0.1",
                        "-p",
                        str(port),
                        "--access-log",
                        str(log_dir / "access.log"),
                        "portal.asgi:application",
                    ],  # fmt: skip
                    env=os.environ.copy(),
                )
            )
            self._wait_until_up(base_url + "/healthz", children[0])
            if not no_agents:
                children.extend(self._start_agents(base_url, speed, log_dir))
            credentials = (Path(settings.VAR_DIR) / "demo-credentials.txt").read_text().splitlines()
            admin_login = next((line for line in credentials if line.startswith("admin ")), "")
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nThe portal is up: {base_url}/  log in as: {admin_login}  (every demo user: "
                    f"{Path(settings.VAR_DIR) / 'demo-credentials.txt'})  Ctrl-C stops everything\n"
                )
            )
            while all(child.poll() is None for child in children[:1]):
                time.sleep(0.5)
        except KeyboardInterrupt:
            self.stdout.write("\nStopping…")
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()

    def _wait_until_up(self, url: str, server: subprocess.Popen, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit("the portal failed to start; see the output above")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"the portal did not answer at {url} within {timeout_s:.0f} s")

    def _demo_tokens(self) -> dict[str, str]:
        """One host token per simulated host, kept in var/ and reused while it still works, so
        repeated demos don't pile up tokens."""
        from portal.telemetry.services import host_token_authenticate, host_token_issue

        store = Path(settings.VAR_DIR) / "demo-agent-tokens.json"
        tokens = json.loads(store.read_text()) if store.exists() else {}
        for hostname, *_ in SIMULATED_HOSTS:
            token = tokens.get(hostname)
            if not token or host_token_authenticate(token) is None:
                tokens[hostname] = host_token_issue(hostname=hostname, label="demo simulator", create_host=True).token
        store.write_text(json.dumps(tokens))
        store.chmod(0o600)
        return tokens

    def _start_agents(self, base_url: str, speed: float, log_dir: Path) -> list[subprocess.Popen]:
        agents = []
        tokens = self._demo_tokens()
        for hostname, scenarios, host_speed in SIMULATED_HOSTS:
            token = tokens[hostname]
            spool = Path(settings.VAR_DIR) / "demo-spool" / hostname
            spool.mkdir(parents=True, exist_ok=True)
            command = [
                sys.executable, "-m", "agents", "--simulate", "4", "--scenario", scenarios, "--hostname", hostname,
                "--speed", str(host_speed or speed), "--interval", "2", "--url", base_url, "--spool-dir", str(spool),
            ]  # fmt: skip
            log = open(log_dir / f"{hostname}.log", "ab")  # noqa: SIM115 - lives as long as the child
            agents.append(
                subprocess.Popen(command, env={**os.environ, "GPU_AGENT_TOKEN": token}, stdout=log, stderr=log)
            )
            self.stdout.write(f"simulated agent {hostname}: {scenarios} (log: {log_dir / (hostname + '.log')})")
        return agents
