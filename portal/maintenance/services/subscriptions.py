"""A user's own notification subscriptions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator, URLValidator

from portal.core.errors import InvalidInput
from portal.maintenance import chat, transports
from portal.maintenance.models import Severity, Subscription
from portal.maintenance.rules import RULES

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Host


def subscription_create(
    *,
    user,
    channel: str,
    target: str,
    min_severity: str,
    rules: list[str] | None = None,
    host: Host | None = None,
    secret: str = "",
) -> Subscription:
    """Subscribe `user` to tickets at or above `min_severity` (of `rules`, empty: all; on `host`,
    None: all) by email, the portal's JSON webhook or a chat robot (portal.maintenance.chat), with
    the robot's signing secret where it has one. Bad input is refused with the field named."""
    errors: dict[str, list[str]] = {}
    if channel not in Subscription.Channel.values:
        errors["channel"] = [f"must be one of {Subscription.Channel.values}"]
    validator = EmailValidator() if channel == "email" else URLValidator(schemes=["http", "https"])
    try:
        validator(target)
    except ValidationError:
        errors["target"] = ["not a valid email address" if channel == "email" else "not a valid http(s) URL"]
    else:
        problem = transports.webhook_target_problem(target) if channel in chat.WEBHOOK_CHANNELS else None
        if problem:
            errors["target"] = [f"webhook target refused: {problem}"]
    if secret and channel not in chat.SIGNED_CHANNELS:
        errors["secret"] = [f"only {' and '.join(chat.SIGNED_CHANNELS)} robots sign their messages"]
    elif len(secret) > 200 or any(not character.isprintable() or character.isspace() for character in secret):
        errors["secret"] = ["at most 200 printable characters, no spaces"]
    if min_severity not in Severity.values:
        errors["min_severity"] = [f"must be one of {Severity.values}"]
    unknown = sorted(set(rules or ()) - set(RULES))
    if unknown:
        errors["rules"] = [f"unknown rule(s): {', '.join(unknown)}"]
    if errors:
        raise InvalidInput("invalid subscription", field_errors=errors)
    return Subscription.objects.create(
        user=user, channel=channel, target=target, secret=secret, min_severity=min_severity,
        rules=sorted(set(rules or ())), host=host,
    )  # fmt: skip


def subscription_delete(*, user, subscription_id: int) -> bool:
    """Remove one of the user's own subscriptions (someone else's is left alone)."""
    deleted, _ = Subscription.objects.filter(pk=subscription_id, user=user).delete()
    return bool(deleted)
