from django.contrib.admin import AdminSite
from django.utils.translation import gettext_lazy as _

from portal.accounts.roles import ROLE_ADMIN, user_has_role


class PortalAdminSite(AdminSite):
    site_header = _("GPU Fleet Portal administration")
    site_title = _("GPU Fleet Portal")

    def has_permission(self, request):
        # Django admin belongs to the portal's admin role, not to a separate staff flag.
        user = request.user
        return user.is_active and (user.is_superuser or user_has_role(user, ROLE_ADMIN))
