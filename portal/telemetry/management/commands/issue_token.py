from django.core.management.base import BaseCommand, CommandError

from portal.core.errors import ApplicationError
from portal.telemetry.services import host_token_issue


class Command(BaseCommand):
    help = "Mint a host token for an agent (creates the host if needed). The token is the last line of output."

    def add_arguments(self, parser):
        parser.add_argument("hostname")
        parser.add_argument("--label", default="", help="What the token is for, e.g. 'agent on dgx-07'.")

    def handle(self, *args, hostname, label, **options):
        try:
            issued = host_token_issue(hostname=hostname, label=label, create_host=True)
        except ApplicationError as error:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in error.field_errors.items())) from None
        self.stderr.write(
            f"Token {issued.record.prefix}… for host {hostname}. It is shown only now; keep it in the agent's config."
        )
        self.stdout.write(issued.token)
