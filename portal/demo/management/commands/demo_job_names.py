"""`make demo`'s stand-in for Slurm's accounting: names the simulated agents' Slurm jobs (user,
account, name) from the simulator's schedule, now and then while the demo runs."""

import time

from django.core.management.base import BaseCommand

from portal.demo.jobs import simulated_jobs_name


class Command(BaseCommand):
    help = "Name the simulated agents' Slurm jobs (demo only); --every N: again every N seconds."

    def add_arguments(self, parser):
        parser.add_argument("--every", type=float, default=0.0, help="Seconds between two passes (0: once).")

    def handle(self, *args, every: float, **options):
        while True:
            named = simulated_jobs_name()
            if named:
                self.stdout.write(f"named {named} simulated Slurm job(s)")
            if every <= 0:
                return
            time.sleep(every)
