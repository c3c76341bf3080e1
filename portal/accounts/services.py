from django.contrib.auth.models import Group, Permission
from django.db import transaction

from portal.accounts.roles import ROLE_PERMISSIONS, ROLES


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
