"""The users in the admin show where each account signs in (local, LDAP, OIDC)."""

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from portal.accounts.models import AccountEvent, Source, UserProfile

User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class PortalUserAdmin(UserAdmin):
    list_display = ("username", "email", "first_name", "last_name", "source", "is_active", "is_superuser")
    list_filter = ("profile__source", "is_active", "is_superuser", "groups")
    list_select_related = ("profile",)
    # Where an account comes from is the directory's to say, not a form's: shown, never edited.
    readonly_fields = ("source", "directory_identity", "revoked_by_directory_at")
    fieldsets = (*UserAdmin.fieldsets, (_("Sign-in"), {"fields": readonly_fields}))

    def user_change_password(self, request, id, form_url=""):
        # A directory account's password is the directory's: one set here would let it sign in
        # past the directory (and its groups).
        user = self.get_object(request, unquote(id))
        if user is not None and self._profile(user) is not None and self._profile(user).source != Source.LOCAL:
            messages.error(request, _("This account signs in with the lab directory: its password is set there."))
            return HttpResponseRedirect(reverse("admin:auth_user_change", args=[user.pk]))
        return super().user_change_password(request, id, form_url)

    @staticmethod
    def _profile(user):
        try:
            return user.profile
        except UserProfile.DoesNotExist:
            return None

    @admin.display(description=_("source"), ordering="profile__source")
    def source(self, user):
        profile = self._profile(user)
        return Source(profile.source).label if profile is not None else Source.LOCAL.label

    @admin.display(description=_("directory identity"))
    def directory_identity(self, user):
        profile = self._profile(user)
        return (profile.directory_id if profile is not None else "") or "-"

    @admin.display(description=_("revoked by the directory at"))
    def revoked_by_directory_at(self, user):
        profile = self._profile(user)
        return profile.directory_revoked_at if profile is not None and profile.directory_revoked_at else "-"


@admin.register(AccountEvent)
class AccountEventAdmin(admin.ModelAdmin):
    list_display = ("at", "kind", "source", "username", "reason", "role_before", "role_after", "client")
    list_filter = ("kind", "source", "reason")
    search_fields = ("username",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
