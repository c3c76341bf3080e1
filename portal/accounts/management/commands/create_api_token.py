from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.accounts.services import api_token_issue


class Command(BaseCommand):
    help = "Mint a personal API token for a user. The token is the last line of output."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--label", default="")

    def handle(self, *args, username, label, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}")
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive")
        secret, token = api_token_issue(user=user, label=label)
        self.stderr.write(f"API token {token.prefix}… for {username}. It is shown only now.")
        self.stdout.write(secret)
