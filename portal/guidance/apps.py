from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class GuidanceConfig(AppConfig):
    name = "portal.guidance"
    label = "guidance"
    verbose_name = _("Guidance")
