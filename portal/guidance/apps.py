from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class GuidanceConfig(AppConfig):
    name = "portal.guidance"
    label = "guidance"
    verbose_name = _("Guidance")

    def ready(self):
        from portal.guidance import panels  # noqa: F401 - panels register themselves
