from django.core.management.base import BaseCommand

from portal.demo.repair_history import repair_history_seed


class Command(BaseCommand):
    help = "Give the demo fleet a repair history worth reading (idempotent; after seed_demo)."

    def handle(self, *args, **options):
        if repair_history_seed():
            self.stdout.write("Repair history: dgx-02 GPU 2 (a repeat offender), dgx-01 GPU 3 out for repair.")
