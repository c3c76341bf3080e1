"""Sign-in against the lab's LDAP directory (django-auth-ldap), the role from its groups.

The settings (AUTH_LDAP_*) are made from LDAP_* in portal/settings.py. django-auth-ldap finds the
user with the service account, binds as them with the typed password (which the portal never
stores: a directory account has an unusable password), reads their groups, and only then, in
get_or_build_user below, the portal decides: a role group, or a refusal that creates nothing."""

import datetime as dt
import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.utils import timezone
from django_auth_ldap.backend import LDAPBackend, ldap_error

from portal.accounts.directory.services import (
    REVOKED,
    UNAVAILABLE,
    VOUCHED,
    client_address,
    directory_user_accept,
    directory_user_may_sign_in,
    directory_user_revoke,
    directory_vouched_set,
    refusal_note,
    role_from_memberships,
    user_role,
)
from portal.accounts.models import Source

logger = logging.getLogger("portal.accounts.directory")


class PortalLDAPBackend(LDAPBackend):
    source = Source.LDAP

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None or username is None or not password:
            return None  # an OIDC callback, or an empty password (an anonymous bind would "succeed")
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id):
        # A session made by this backend ends when its account is deactivated (Django's
        # ModelBackend checks is_active; django-auth-ldap's get_user does not).
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def get_or_build_user(self, username, ldap_user):
        request = ldap_user._request
        role = role_from_memberships(
            memberships=ldap_user.group_dns, role_values=settings.LDAP_ROLE_GROUPS, casefold=True
        )
        user, built = super().get_or_build_user(username, ldap_user)
        if not built:
            reason = directory_user_may_sign_in(user=user, source=Source.LDAP)
            if reason is not None:
                refusal_note(request, reason=reason, source=Source.LDAP)
                raise PermissionDenied(reason)
        if role is None:
            if not built:
                directory_user_revoke(user=user, source=Source.LDAP, client=client_address(request))
            refusal_note(request, reason="no_role", source=Source.LDAP)
            raise PermissionDenied("no_role")
        ldap_user._portal_role = role
        return user, built

    def authenticate_ldap_user(self, ldap_user, password):
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is not None:
            directory_user_accept(
                user=user,
                source=Source.LDAP,
                directory_id=ldap_user.dn,
                role=ldap_user._portal_role,
                client=client_address(ldap_user._request),
            )
            directory_vouched_set(user=user, until=timezone.now() + dt.timedelta(seconds=settings.LIVE_RECHECK_S))
        return user


def _directory_error(sender, context, user, request, exception, **kwargs):
    # django-auth-ldap logs the error (never a password) and answers None, as for a wrong password:
    # the login form says the directory did not answer instead. The user's own wrong password is
    # not an LDAPError here; a refused service account (LDAP_BIND_DN) is, and fails closed the same way.
    refusal_note(request, reason="directory_unavailable", source=Source.LDAP)


ldap_error.connect(_directory_error, sender=PortalLDAPBackend, dispatch_uid="portal.accounts.ldap_error")


def ldap_connection():
    """A connection bound as the service account, with the sign-in's timeouts and TLS; errors raise."""
    import ldap

    connection = ldap.initialize(settings.AUTH_LDAP_SERVER_URI)
    for option, value in {**settings.AUTH_LDAP_GLOBAL_OPTIONS, **settings.AUTH_LDAP_CONNECTION_OPTIONS}.items():
        connection.set_option(option, value)
    if settings.AUTH_LDAP_GLOBAL_OPTIONS:
        connection.set_option(ldap.OPT_X_TLS_NEWCTX, 0)
    if settings.AUTH_LDAP_START_TLS:
        connection.start_tls_s()
    connection.simple_bind_s(settings.AUTH_LDAP_BIND_DN, settings.AUTH_LDAP_BIND_PASSWORD)
    return connection


def _ldap_account_groups(connection, *, username: str) -> tuple[str, list[str]]:
    """The account's DN and the DNs of the groups under LDAP_GROUP_SEARCH_BASE that list it as a
    member; ("", []) for an account the directory no longer has (or has twice)."""
    import ldap
    from ldap.filter import escape_filter_chars

    found = [
        dn
        for dn, _attrs in connection.search_s(
            settings.LDAP_USER_SEARCH_BASE,
            ldap.SCOPE_SUBTREE,
            settings.LDAP_USER_FILTER % {"user": escape_filter_chars(username)},
            ["1.1"],
        )
        if dn  # Active Directory adds referrals without a DN
    ]
    if len(found) != 1:
        return "", []
    groups = [
        dn
        for dn, _attrs in connection.search_s(
            settings.LDAP_GROUP_SEARCH_BASE,
            ldap.SCOPE_SUBTREE,
            f"(member={escape_filter_chars(found[0])})",
            ["1.1"],
        )
        if dn
    ]
    return found[0], groups


def ldap_account_recheck(*, user, profile, client: str | None = None) -> str:
    """One account's groups read again, as ldap_accounts_sync does for all (recheck's verdicts)."""
    import ldap

    try:
        connection = ldap_connection()
        try:
            dn, groups = _ldap_account_groups(connection, username=user.get_username())
        finally:
            connection.unbind_s()
    except ldap.LDAPError as exc:
        logger.warning("LDAP did not answer the re-check of %s: %s", user.get_username(), type(exc).__name__)
        return UNAVAILABLE
    role = role_from_memberships(memberships=groups, role_values=settings.LDAP_ROLE_GROUPS, casefold=True)
    if role is None:
        directory_user_revoke(user=user, source=Source.LDAP, client=client)
        return REVOKED
    if user_role(user) != role:
        directory_user_accept(user=user, source=Source.LDAP, directory_id=dn, role=role, client=client)
    return VOUCHED


def ldap_accounts_sync() -> dict[str, int]:
    """Read every active LDAP account's groups again, as a sign-in would, without its password:
    a lost role group revokes the account (sessions end, tokens revoked), a changed one changes
    the role; an account gone from the directory is revoked. Any directory error stops the run
    before it decides anything more (a directory that does not answer revokes no one)."""
    from portal.accounts.models import UserProfile

    counts = {"checked": 0, "revoked": 0, "changed": 0}
    profiles = list(UserProfile.objects.select_related("user").filter(source=Source.LDAP, user__is_active=True))
    if not profiles:
        return counts
    connection = ldap_connection()
    try:
        for profile in profiles:
            user = profile.user
            dn, groups = _ldap_account_groups(connection, username=user.get_username())
            role = role_from_memberships(memberships=groups, role_values=settings.LDAP_ROLE_GROUPS, casefold=True)
            counts["checked"] += 1
            if role is None:
                directory_user_revoke(user=user, source=Source.LDAP)
                counts["revoked"] += 1
            elif user_role(user) != role:
                directory_user_accept(user=user, source=Source.LDAP, directory_id=dn, role=role)
                counts["changed"] += 1
    finally:
        connection.unbind_s()
    return counts
