from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "portal.accounts"
    label = "accounts"
    default = True

    def ready(self):
        # Permissions of models added by later migrations exist only after post_migrate has made
        # them, so the roles are brought up to date there, after every migrate.
        post_migrate.connect(_sync_roles, dispatch_uid="portal.accounts.sync_roles")


class PortalAdminConfig(admin_apps.AdminConfig):
    """Django admin on the portal's own site: it belongs to the admin role (see admin_site)."""

    default = False
    default_site = "portal.accounts.admin_site.PortalAdminSite"


def _sync_roles(sender, using="default", **kwargs):
    from portal.accounts.services import role_permissions_sync

    role_permissions_sync(using=using)
