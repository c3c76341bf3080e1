"""`make demo`: `manage.py run` (web server, Celery worker and beat on the embedded default) plus
the demo data and a few simulated agents; Ctrl-C stops every process it started.

A fresh clone needs nothing but Python: SQLite, the in-memory channel layer and the broker kept in
files under VAR_DIR. manage.py turns DEBUG on for this command (the settings are production-safe).
"""

import contextlib
import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from portal.demo import story
from portal.demo.checklists import demo_checklists_seed
from portal.demo.directory import DEMO_PEOPLE, directory_running, slapd_available
from portal.demo.inventory import inventory_demo_seed
from portal.demo.jobs import jobs_history_seed
from portal.demo.repair import repair_story_seed
from portal.demo.wear import wear_demo_seed
from portal.demo.windows import demo_windows_seed
from portal.directory_settings import ldap_packages_missing
from portal.ops.management.commands.run import prepare, start_portal, supervised
from portal.ops.supervise import Child


class Command(BaseCommand):
    help = "Run the demo: the portal on http://127.0.0.1:8000 with simulated agents pushing readings."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-agents", action="store_true", help="Start the portal only.")
        parser.add_argument("--no-slurm", action="store_true", help="Don't start the local Slurm cluster.")
        parser.add_argument(
            "--ldap",
            action="store_true",
            help="Also start a throwaway LDAP directory (slapd) whose people sign in with their directory passwords.",
        )
        parser.add_argument(
            "--speed", type=float, default=720.0, help="Simulated seconds per real second on the drifting host."
        )

    def handle(self, *args, host, port, no_agents, speed, no_slurm=False, ldap=False, **options):
        with contextlib.ExitStack() as stack:
            if ldap:
                self.directory_start(stack)
            self.run_demo(host=host, port=port, no_agents=no_agents, speed=speed, no_slurm=no_slurm, ldap=ldap)

    def directory_start(self, stack) -> None:
        """slapd on a free loopback port, its LDAP_* handed to the web server and worker."""
        missing = ldap_packages_missing()
        if missing:
            raise CommandError(f"--ldap: {missing}")
        if not slapd_available():
            raise CommandError("--ldap needs Debian's slapd and ldap-utils: apt-get install slapd ldap-utils")
        directory = stack.enter_context(directory_running())
        os.environ.update(directory.settings())
        self.stdout.write(f"LDAP directory (slapd) at {directory.uri}; its people sign in on the login page:")
        for name, (password, _given, _surname, role) in DEMO_PEOPLE.items():
            self.stdout.write(f"  {name} / {password}  ({role or 'in no role group: refused'})")

    def run_demo(self, *, host, port, no_agents, speed, no_slurm, ldap):
        prepare()
        tokens: dict[str, str] = {}
        slurm = None if no_slurm else story.slurm_start(self.stdout.write)

        def seed():
            # While web server, worker and beat boot (seconds): the data they start on.
            call_command("seed_demo")
            call_command("seed_repair_history")  # reports: a repair history worth reading
            tokens.update(story.prepare_simulated_hosts())
            backfilled = story.backfill_history()
            if backfilled:
                self.stdout.write(f"History: {backfilled} readings of the last 24 h for the simulated hosts.")
            if repair_story_seed():  # on the simulated GPU and driver; before its Slurm node (no past drains)
                self.stdout.write("Repair: sim-desk-c GPU 0 repaired twice 3 days ago (diagnostics: failed, passed).")
            if inventory_demo_seed():  # after the repair: its riser and its RMA case
                self.stdout.write(
                    "Inventory: spare parts (the riser below its reorder level), warranties, an RMA case."
                )
            jobs = jobs_history_seed(live_from=timezone.now() - story.HISTORY)  # the week before the backfill
            if jobs:
                self.stdout.write(f"Jobs: {jobs} jobs of alice, bob and chen over the last 7 days (Usage report).")
            if slurm is not None:
                story.slurm_node_assign(slurm)
            if wear_demo_seed():  # 60 days of wear before that: sim-rack-b GPU 0's dust and its cleaning
                self.stdout.write("Wear: 60 days of meters for the simulated GPUs (sim-rack-b GPU 0: dust, cleaned).")
            runs = demo_checklists_seed()  # after the history: automatic items judged on it
            if runs:
                self.stdout.write(f"Checklists: {runs} demo runs (one in progress, one with a failed item).")
            if demo_windows_seed():
                self.stdout.write("Maintenance windows: dgx-02's driver update next week, with its checklist.")

        log_dir = Path(settings.VAR_DIR) / "demo-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        access_log = str(log_dir / "access.log")
        with supervised(self) as supervisor, story.slurm_stopped_after(slurm):
            # The portal's own output in files, so that this terminal shows the demo's story.
            base_url = start_portal(
                supervisor, host=host, port=port, access_log=access_log, log_dir=log_dir, meanwhile=seed
            )
            if not no_agents:
                for hostname, scenarios, command in story.agent_commands(base_url, speed):
                    log = log_dir / f"{hostname}.log"
                    env = {**story.agent_env(), "GPU_AGENT_TOKEN": tokens[hostname]}
                    supervisor.start(Child(f"simulated agent {hostname}", command, env, log))
                    self.stdout.write(f"simulated agent {hostname}: {scenarios} (log: {log})")
                # What Slurm's accounting would say of the simulated agents' Slurm jobs.
                names = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "demo_job_names", "--every", "10"]
                supervisor.start(Child("demo job names", names, story.agent_env(), log_dir / "job-names.log"))
            self.stdout.write(f"web server, worker and beat: {log_dir}/web.log, worker.log, beat.log")
            self.stdout.write(self.style.SUCCESS(self.banner(base_url, ldap)))
            supervisor.run_forever()

    def banner(self, base_url: str, ldap: bool = False) -> str:
        credentials = (Path(settings.VAR_DIR) / "demo-credentials.txt").read_text().splitlines()
        admin_login = next((line for line in credentials if line.startswith("admin ")), "")
        return (
            f"\nThe portal is up: {base_url}/  log in as: {admin_login}  (every demo user: "
            f"{Path(settings.VAR_DIR) / 'demo-credentials.txt'})\n"
            + (
                f"Directory sign-in: ada / {DEMO_PEOPLE['ada'][0]} (admin), tess, vic; nora is refused.\n"
                if ldap
                else ""
            )
            + story.TIMELINE
            + "Ctrl-C stops everything.\n"
        )
