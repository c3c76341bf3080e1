from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class CoreConfig(AppConfig):
    name = "portal.core"
    label = "core"
    default = True


class PortalAdminConfig(admin_apps.AdminConfig):
    default = False
    default_site = "portal.core.admin_site.PortalAdminSite"
