from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db.models.signals import m2m_changed, post_migrate, pre_save


class AccountsConfig(AppConfig):
    name = "portal.accounts"
    label = "accounts"
    default = True

    def ready(self):
        # Permissions of models added by later migrations exist only after post_migrate has made
        # them, so the roles are brought up to date there, after every migrate.
        post_migrate.connect(_sync_roles, dispatch_uid="portal.accounts.sync_roles")
        # Passwords and the active flag change through many doors (account pages, the admin site,
        # `manage.py changepassword`, the shell); a save signal sees them all.
        pre_save.connect(_user_saving, sender=get_user_model(), dispatch_uid="portal.accounts.user_saving")
        user_logged_in.connect(_language_into_session, dispatch_uid="portal.accounts.language_into_session")
        # Every sign-in and every refusal, whatever the door (login form, OIDC callback, admin login).
        user_logged_in.connect(_signed_in, dispatch_uid="portal.accounts.signed_in")
        user_login_failed.connect(_sign_in_failed, dispatch_uid="portal.accounts.sign_in_failed")
        # A role given or taken locally (the admin site, the shell) is in the audit trail too.
        m2m_changed.connect(
            _groups_changing, sender=get_user_model().groups.through, dispatch_uid="portal.accounts.groups_changing"
        )


class PortalAdminConfig(admin_apps.AdminConfig):
    """Django admin on the portal's own site: it belongs to the admin role (see admin_site)."""

    default = False
    default_site = "portal.accounts.admin_site.PortalAdminSite"


def _sync_roles(sender, using="default", **kwargs):
    from portal.accounts.services import role_permissions_sync

    role_permissions_sync(using=using)


def _user_saving(sender, instance, raw=False, update_fields=None, **kwargs):
    if raw or instance.pk is None:
        return
    if update_fields is not None and not {"password", "is_active"} & set(update_fields):
        return  # e.g. last_login on every login
    previous = sender.objects.filter(pk=instance.pk).values("password", "is_active").first()
    if previous is None:
        return
    from portal.accounts.services import user_security_change
    from portal.core.middleware import audit_actor

    user_security_change(
        user=instance,
        previous_password=previous["password"],
        previous_active=previous["is_active"],
        changed_by=audit_actor(),
        rehash=_is_rehash(instance, update_fields),
    )


def _is_rehash(user, update_fields) -> bool:
    # A login whose stored hash is out of date (a Django upgrade raises the iteration count; a
    # hasher listed after the first) stores the same password again: AbstractBaseUser.check_password
    # calls set_password, forgets the raw password (_password) and saves only the password field.
    # A password set on purpose keeps _password until saved; an unusable one is never a rehash.
    return (
        update_fields is not None
        and set(update_fields) == {"password"}
        and getattr(user, "_password", None) is None
        and user.has_usable_password()
    )


def _language_into_session(sender, request, user, **kwargs):
    from portal.accounts.middleware import SESSION_LANGUAGE_KEY
    from portal.accounts.services import user_language

    if request is not None and hasattr(request, "session"):
        request.session[SESSION_LANGUAGE_KEY] = user_language(user)


def _signed_in(sender, request, user, **kwargs):
    from portal.accounts.directory.recheck import SESSION_VOUCHED_KEY, session_vouched_mark
    from portal.accounts.directory.services import account_event_record, client_address, user_source
    from portal.accounts.models import AccountEvent

    if request is not None and hasattr(request, "session"):
        request.session[SESSION_VOUCHED_KEY] = session_vouched_mark(user=user)
    account_event_record(
        kind=AccountEvent.Kind.SIGN_IN, source=user_source(user), user=user, client=client_address(request)
    )


def _sign_in_failed(sender, credentials, request=None, **kwargs):
    from portal.accounts.directory.oidc import RECORDED_ATTR
    from portal.accounts.directory.services import (
        REFUSAL_ATTR,
        SOURCE_ATTR,
        account_event_record,
        client_address,
    )
    from portal.accounts.models import AccountEvent, Source

    # Only the user name is kept (Django has already masked the password in `credentials`).
    username = str(credentials.get("username") or getattr(request, "_portal_oidc_username", "") or "")
    account_event_record(
        kind=AccountEvent.Kind.REFUSED,
        source=getattr(request, SOURCE_ATTR, None) or Source.LOCAL,
        username=username,
        reason=getattr(request, REFUSAL_ATTR, None) or "credentials",
        client=client_address(request),
    )
    if request is not None:
        setattr(request, RECORDED_ATTR, True)


def _groups_changing(sender, instance, action, reverse, **kwargs):
    if reverse or not action.startswith("pre_"):
        return  # a group's members changed from the group's side: not a door the portal offers
    from portal.accounts.directory.services import user_groups_changing
    from portal.core.middleware import audit_actor

    user_groups_changing(user=instance, action=action, actor=audit_actor())
