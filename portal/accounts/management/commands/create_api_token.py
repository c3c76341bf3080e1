from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.accounts.services import TOKEN_DEFAULT_DAYS, api_token_issue


class Command(BaseCommand):
    help = "Mint a personal API token for a user. The token is the last line of output."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--label", default="")
        lifetime = parser.add_mutually_exclusive_group()
        lifetime.add_argument(
            "--expires-in-days", type=int, default=TOKEN_DEFAULT_DAYS, help=f"default {TOKEN_DEFAULT_DAYS}"
        )
        lifetime.add_argument("--never-expires", action="store_true", help="valid until revoked")

    def handle(self, *args, username, label, expires_in_days, never_expires, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}")
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive")
        if not never_expires and expires_in_days < 1:
            raise CommandError("--expires-in-days: at least one day")
        # Whoever runs manage.py administers the portal: they may mint a token that never expires.
        secret, token = api_token_issue(
            user=user, label=label, expires_in_days=None if never_expires else expires_in_days, may_never_expire=True
        )
        until = f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "never expires"
        self.stderr.write(f"API token {token.prefix}… for {username} ({until}). It is shown only now.")
        self.stdout.write(secret)
