"""Lab accounts from a directory (LDAP) or an OpenID provider: the role from the groups at every
sign-in, the account's source, refusals, and the audit trail of all three.

A directory account's role is the highest of admin > technician > viewer whose group (LDAP) or
claim value (OIDC) it has. With none, the sign-in is refused and the account is *revoked*: made
inactive (its sessions stop at their next request, the live pages close their sockets, see
portal.live.signals, and every personal API token is revoked by portal.accounts.apps' save hook),
its role groups removed. A later sign-in with a role group again brings it back. The portal
learns of a lost group when the account next signs in, when any of its sessions or tokens is used
more than LIVE_RECHECK_S after the directory last vouched for it (portal.accounts.directory.recheck),
or when `manage.py directory_sync` (LDAP) runs; from then on, nothing of that account works."""

import contextlib
import datetime as dt
import logging

from auditlog.models import LogEntry
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.accounts.models import AccountEvent, Source, UserProfile
from portal.accounts.roles import ROLES
from portal.core.audit import audit_line

logger = logging.getLogger("portal.accounts.directory")

# Why a sign-in was refused: the code is stored, the sentence shown (in the reader's language).
REASONS = {
    "credentials": _("Wrong user name or password."),
    "no_role": _(
        "Your account is not in any of the portal's role groups (admin, technician, viewer), so it "
        "cannot sign in. Ask your lab's IT to add you to one."
    ),
    "directory_unavailable": _(
        "The lab directory did not answer, so directory accounts cannot sign in right now. Try again "
        "in a few minutes; local accounts still sign in."
    ),
    "local_account": _(
        "A local account of the portal has this name, so the directory cannot sign it in. Ask an admin."
    ),
    "inactive": _("This account has been deactivated by an admin."),
    "provider_unavailable": _("The sign-in provider did not answer. Try again in a few minutes."),
    "provider_refused": _("The sign-in provider refused the sign-in."),
    "token_invalid": _("The sign-in provider's answer failed its checks, so the sign-in was refused."),
    "state": _("This sign-in link is stale or was not started here. Start again from the login page."),
    "signin_expired": _(
        "The sign-in provider can no longer be asked whether your account still has its role. Sign in again."
    ),
}

# What a directory says when asked again about a signed-in account (portal.accounts.directory.recheck);
# any other answer is the reason it no longer vouches for the account (a REASONS code).
VOUCHED = "vouched"  # a role (maybe another one, applied)
REVOKED = "revoked"  # no role: the account was revoked (inactive, tokens revoked)
UNAVAILABLE = "unavailable"  # no answer: the last verdict stands

# How the request carries a backend's verdict to the login form and the audit trail.
REFUSAL_ATTR = "portal_signin_refusal"
SOURCE_ATTR = "portal_signin_source"


def refusal_note(request, *, reason: str, source: str) -> None:
    """Remember on the request why a directory sign-in failed (the first reason wins)."""
    if request is not None and not hasattr(request, REFUSAL_ATTR):
        setattr(request, REFUSAL_ATTR, reason)
        setattr(request, SOURCE_ATTR, source)


def refusal_message(reason: str | None) -> str:
    return str(REASONS.get(reason or "credentials", REASONS["credentials"]))


def role_from_memberships(*, memberships, role_values: dict[str, str], casefold: bool = False) -> str | None:
    """The highest role whose group / claim value is among `memberships`, or None."""
    norm = (lambda v: v.casefold()) if casefold else (lambda v: v)
    have = {norm(str(m)) for m in memberships}
    for role in ROLES:  # admin, technician, viewer: the highest first
        value = role_values.get(role)
        if value and norm(value) in have:
            return role
    return None


def user_role(user) -> str:
    names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    return next((role for role in ROLES if role in names), "")


def user_source(user) -> str:
    if user is None or user.pk is None:
        return Source.LOCAL
    return UserProfile.objects.filter(user=user).values_list("source", flat=True).first() or Source.LOCAL


def client_address(request) -> str | None:
    return request.META.get("REMOTE_ADDR") or None if request is not None else None


def account_event_record(
    *,
    kind: str,
    source: str,
    user=None,
    username: str = "",
    reason: str = "",
    role_before: str = "",
    role_after: str = "",
    client: str | None = None,
    actor=None,
) -> AccountEvent:
    """Store the event and its audit-trail entry, credited to `actor` (an admin changing a role),
    else to the account it is about."""
    event = AccountEvent.objects.create(
        kind=kind,
        source=source,
        user=user if user is not None and user.pk else None,
        username=(username or (user.get_username() if user is not None else ""))[:150],
        reason=reason,
        role_before=role_before,
        role_after=role_after,
        client=client,
    )
    changes = {"kind": [None, kind], "source": [None, source]}
    for field in ("reason", "role_before", "role_after"):
        if getattr(event, field):
            changes[field] = [None, getattr(event, field)]
    audit_line(
        about=event,
        action=LogEntry.Action.CREATE,
        changes=changes,
        actor=actor if actor is not None and actor.pk else event.user,
        client=client,
    )
    return event


@contextlib.contextmanager
def _directory_changing(user):
    """The directory's own role changes are recorded by the services below, not by user_groups_changing."""
    user._portal_directory_changing = True
    try:
        yield
    finally:
        user._portal_directory_changing = False


def user_groups_changing(*, user, action: str, actor=None) -> None:
    """A local change of a user's groups (the admin site, `user_set_role`, the shell): once the
    transaction commits, a role that differs from before is in the audit trail, source `local`,
    credited to whoever made it. Django changes groups in steps (remove, then add): only the
    result counts."""
    if getattr(user, "_portal_directory_changing", False) or user.pk is None:
        return
    if action.startswith("pre_") and not hasattr(user, "_portal_role_initial"):
        user._portal_role_initial = user_role(user)

        def settle():
            initial = user.__dict__.pop("_portal_role_initial", "")
            after = user_role(user)
            if after != initial:
                account_event_record(
                    kind=AccountEvent.Kind.ROLE_CHANGE,
                    source=user_source(user),
                    user=user,
                    role_before=initial,
                    role_after=after,
                    actor=actor,
                )

        transaction.on_commit(settle)


def _profile(user) -> UserProfile:
    profile, _created = UserProfile.objects.get_or_create(user=user)
    return profile


def directory_identity_owner(*, source: str, directory_id: str):
    """The user a directory identity (an LDAP DN, an OIDC issuer|subject) belongs to, or None."""
    profile = UserProfile.objects.select_related("user").filter(source=source, directory_id=directory_id).first()
    return profile.user if profile is not None else None


def directory_user_may_sign_in(*, user, source: str) -> str | None:
    """None when the directory may sign this existing account in, else the refusal's reason code:
    a local account is never taken over by a directory account of the same name, and an account an
    admin deactivated stays so."""
    profile = UserProfile.objects.filter(user=user).first()
    if profile is None or profile.source != source:
        return "local_account"
    if not user.is_active and profile.directory_revoked_at is None:
        return "inactive"
    return None


@transaction.atomic
def directory_user_accept(*, user, source: str, directory_id: str, role: str, client: str | None = None) -> None:
    """A directory sign-in with `role`: record the source, bring a revoked account back, set the
    role (a change goes to the audit trail), and make sure no password is stored for it."""
    profile = _profile(user)
    profile.source = source
    profile.directory_id = directory_id[:500]
    revoked = profile.directory_revoked_at is not None
    profile.directory_revoked_at = None
    profile.save(update_fields=["source", "directory_id", "directory_revoked_at"])
    fields = []
    if revoked and not user.is_active:
        user.is_active = True
        fields.append("is_active")
    if user.has_usable_password():
        user.set_unusable_password()
        fields.append("password")
    if fields:
        user.save(update_fields=fields)
    before = user_role(user)
    if before != role:
        with _directory_changing(user):
            user.groups.remove(*Group.objects.filter(name__in=ROLES))
            user.groups.add(Group.objects.get(name=role))
        account_event_record(
            kind=AccountEvent.Kind.ROLE_CHANGE,
            source=source,
            user=user,
            role_before=before,
            role_after=role,
            client=client,
        )
        logger.info("%s account %s: role %s -> %s", source, user.get_username(), before or "none", role)


@transaction.atomic
def directory_user_revoke(*, user, source: str, client: str | None = None) -> None:
    """The directory gave `user` no role: no role groups, inactive (sessions end, sockets close,
    API tokens revoked), marked as revoked by the directory so that a role brings it back."""
    before = user_role(user)
    with _directory_changing(user):
        user.groups.remove(*Group.objects.filter(name__in=ROLES))
    profile = _profile(user)
    if profile.directory_revoked_at is None:
        profile.directory_revoked_at = timezone.now()
        profile.save(update_fields=["directory_revoked_at"])
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    if before:
        account_event_record(
            kind=AccountEvent.Kind.ROLE_CHANGE,
            source=source,
            user=user,
            role_before=before,
            role_after="",
            client=client,
        )
        logger.warning("%s account %s lost every role group: signed out, tokens revoked", source, user.get_username())


def directory_vouched_set(*, user, until: dt.datetime, refresh_token: str | None = None) -> None:
    """A sign-in (or a refresh) vouches for the account until `until`; a new refresh token is kept."""
    fields = {"directory_vouched_until": until}
    if refresh_token is not None:
        fields["directory_refresh_token"] = refresh_token
    UserProfile.objects.filter(user=user).update(**fields)


def directory_refresh_token_set(*, profile, refresh_token: str) -> None:
    """The provider rotated the refresh token: the old one no longer works."""
    UserProfile.objects.filter(pk=profile.pk).update(directory_refresh_token=refresh_token)
