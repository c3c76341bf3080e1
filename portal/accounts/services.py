from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone

from portal.accounts.models import ApiToken
from portal.accounts.roles import ROLE_PERMISSIONS, ROLES
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


def api_token_issue(*, user, label: str = "") -> tuple[str, ApiToken]:
    """Mint a personal API token; the secret is returned once and never stored in clear."""
    secret = secret_new(API_TOKEN_PREFIX)
    token = ApiToken.objects.create(
        user=user, label=label[:100], prefix=secret_prefix(secret), secret_hash=secret_hash(secret)
    )
    return secret, token


def api_token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def api_token_authenticate(raw: str):
    """The active user of a live personal token, or None."""
    if not raw.startswith(API_TOKEN_PREFIX) or len(raw) > 200:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(secret_hash=secret_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    token_touch(token)
    return token.user
