from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "portal.accounts"
    label = "accounts"

    def ready(self):
        # Permissions of models added by later migrations exist only after post_migrate has made
        # them, so the roles are brought up to date there, after every migrate.
        post_migrate.connect(_sync_roles, dispatch_uid="portal.accounts.sync_roles")


def _sync_roles(sender, using="default", **kwargs):
    from portal.accounts.services import role_permissions_sync

    role_permissions_sync(using=using)
