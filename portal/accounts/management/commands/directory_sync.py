from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Read every LDAP account's role groups again now (beat does it every LDAP_SYNC_MINUTES): "
        "an account that lost every role group is signed out and its API tokens revoked."
    )

    def handle(self, *args, **options):
        if not settings.LDAP_ENABLED:
            raise CommandError("LDAP is off (LDAP_SERVER_URI is not set)")
        import ldap

        from portal.accounts.directory.ldap import ldap_accounts_sync

        try:
            counts = ldap_accounts_sync()
        except ldap.LDAPError as exc:
            raise CommandError(f"the directory did not answer: {type(exc).__name__}; nothing was changed") from None
        self.stdout.write(
            f"{counts['checked']} LDAP accounts checked: {counts['changed']} role changes, {counts['revoked']} revoked."
        )
