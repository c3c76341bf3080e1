from django.contrib.admin import AdminSite

from portal.accounts.roles import ROLE_ADMIN, user_has_role


class PortalAdminSite(AdminSite):
    site_header = "GPU Fleet Portal administration"
    site_title = "GPU Fleet Portal"

    def has_permission(self, request):
        # Django admin belongs to the portal's admin role, not to a separate staff flag.
        user = request.user
        return user.is_active and (user.is_superuser or user_has_role(user, ROLE_ADMIN))
