import datetime as dt

from django.conf import settings
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.accounts.middleware import SESSION_LANGUAGE_KEY
from portal.accounts.models import ApiToken, UserProfile
from portal.accounts.roles import ROLE_PERMISSIONS, ROLES, role_flags
from portal.core.errors import InvalidInput
from portal.core.tokens import secret_hash, secret_new, secret_prefix, token_touch


def _matching_permissions(patterns: dict[str, list[str]], using: str) -> list[Permission]:
    chosen = []
    for permission in Permission.objects.using(using).select_related("content_type"):
        app_label = permission.content_type.app_label
        model = permission.content_type.model
        action = permission.codename.split("_", 1)[0]
        actions = patterns.get(f"{app_label}.{model}", patterns.get(app_label))
        if actions and ("*" in actions or action in actions):
            chosen.append(permission)
    return chosen


@transaction.atomic
def role_permissions_sync(*, using: str = "default") -> None:
    """Give each role group exactly the permissions ROLE_PERMISSIONS names."""
    for role in ROLES:
        group, _ = Group.objects.using(using).get_or_create(name=role)
        group.permissions.set(_matching_permissions(ROLE_PERMISSIONS[role], using))


@transaction.atomic
def user_set_role(*, user, role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"Unknown role {role!r}; expected one of {', '.join(ROLES)}")
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    user.groups.add(Group.objects.get(name=role))


API_TOKEN_PREFIX = "gfu_"  # GPU fleet user


TOKEN_LIFETIME_DAYS = (30, 90, 365)
# A personal token expires after this unless an admin chooses otherwise: a token forgotten in a
# script or a laptop stops working by itself.
TOKEN_DEFAULT_DAYS = 90


def api_token_issue(
    *, user, label: str = "", expires_in_days: int | None = TOKEN_DEFAULT_DAYS, may_never_expire: bool | None = None
) -> tuple[str, ApiToken]:
    """Mint a personal API token, valid for `expires_in_days` (90 by default) or, None, until
    revoked; the secret is returned once and never stored in clear. A token that never expires
    is for admins only (`may_never_expire`: None asks the user's role; True for whoever runs the
    portal's shell)."""
    if expires_in_days is not None and expires_in_days < 1:
        raise InvalidInput("invalid token lifetime", field_errors={"expires_in_days": "At least one day."})
    if expires_in_days is None and not (role_flags(user)["admin"] if may_never_expire is None else may_never_expire):
        raise InvalidInput(
            "invalid token lifetime",
            field_errors={"expires_in_days": "Only admins may mint a token that never expires."},
        )
    secret = secret_new(API_TOKEN_PREFIX)
    expires_at = timezone.now() + dt.timedelta(days=expires_in_days) if expires_in_days else None
    token = ApiToken.objects.create(
        user=user,
        label=label[:100],
        prefix=secret_prefix(secret),
        secret_hash=secret_hash(secret),
        expires_at=expires_at,
    )
    return secret, token


def api_token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def api_tokens_revoke_all(*, user) -> int:
    """Revoke every live token of `user` (their password was reset by someone else, or they were
    deactivated: whoever held their tokens must not keep acting as them)."""
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=timezone.now())


def api_token_authenticate(raw: str):
    """The active user of a live personal token (not revoked, not expired) whose directory, if it
    has one, still gives it a role (asked again after LIVE_RECHECK_S), or None."""
    from portal.accounts.directory.recheck import directory_account_recheck

    if not raw.startswith(API_TOKEN_PREFIX) or len(raw) > 200:
        return None
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user", "user__profile")
        .filter(secret_hash=secret_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if token is None or directory_account_recheck(user=token.user) is None:
        return None
    token_touch(token)
    return token.user


def api_token_refusal(raw: str) -> str | None:
    """Why a known token was refused (expired, revoked), for the 401's message; None when unknown."""
    if not raw.startswith(API_TOKEN_PREFIX) or len(raw) > 200:
        return None
    token = (
        ApiToken.objects.filter(secret_hash=secret_hash(raw))
        .only("revoked_at", "expires_at", "user__is_active")
        .select_related("user")
        .first()
    )
    if token is None:
        return None
    if token.revoked_at is not None:
        return f"this API token was revoked at {token.revoked_at:%Y-%m-%d %H:%M} UTC: mint a new one on /account/"
    if token.is_expired():
        return f"this API token expired at {token.expires_at:%Y-%m-%d %H:%M} UTC: mint a new one on /account/"
    if token.user.is_active:  # a live token of an active user: its directory no longer vouches for it
        return (
            "your lab's sign-in provider no longer confirms this account's role: sign in to the portal again, "
            "then this token works again"
        )
    return None


def user_security_change(
    *, user, previous_password: str, previous_active: bool, changed_by, rehash: bool = False
) -> None:
    """React to a change of a user's password or active flag, whatever made it (a page, the admin
    site, `manage.py changepassword`, the shell): deactivation, or a password set by anyone but
    the user, revokes all their API tokens. A `rehash` (the same password stored again under a
    newer hasher or iteration count, which Django does when the user logs in) changes nothing."""
    deactivated = previous_active and not user.is_active
    reset_by_other = not rehash and user.password != previous_password and getattr(changed_by, "pk", None) != user.pk
    if deactivated or reset_by_other:
        api_tokens_revoke_all(user=user)


def user_language(user) -> str:
    """The user's chosen language code, or "" to follow the browser."""
    return UserProfile.objects.filter(user=user).values_list("language", flat=True).first() or ""


def user_language_set(*, user, language: str, session=None) -> None:
    """Choose the user's language ("" follows the browser); the session follows at once."""
    if language and language not in dict(settings.LANGUAGES):
        raise InvalidInput(
            "unknown language", field_errors={"language": f"one of {', '.join(dict(settings.LANGUAGES))}"}
        )
    UserProfile.objects.update_or_create(user=user, defaults={"language": language})
    if session is not None:
        session[SESSION_LANGUAGE_KEY] = language
