from django.core.management.base import BaseCommand, CommandError

from portal.core.errors import ApplicationError
from portal.remote_write.services.sources import ingest_source_issue


class Command(BaseCommand):
    help = "Create an ingest source (a Prometheus that remote-writes to the portal) and print its token, once."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--hosts", required=True, help="shell-style pattern of the hostnames it may feed")

    def handle(self, *args, name, hosts, **options):
        try:
            issued = ingest_source_issue(name=name, hosts=hosts)
        except ApplicationError as error:
            problems = "; ".join(f"{problem.loc}: {problem.msg}" for problem in error.problems)
            raise CommandError(f"{error.message} ({problems})" if problems else error.message) from None
        self.stderr.write(
            f"Source {issued.record.name!r} may feed hosts matching {issued.record.hosts!r}. Its token, shown once; "
            "put it in prometheus.yml's remote_write authorization credentials:"
        )
        self.stdout.write(issued.token)
