"""Shared shape of the portal's bearer secrets (host tokens and personal API tokens)."""

import datetime as dt
import hashlib
import secrets

from django.db.models import Q
from django.utils import timezone

LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


def secret_new(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    # SHA-256, not a password hash: the secret is 32 random bytes, nothing to brute-force, and
    # it is checked on every request.
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_prefix(secret: str, visible: int = 6) -> str:
    head, _, rest = secret.partition("_")
    return f"{head}_{rest[:visible]}"


def token_touch(token) -> None:
    """Record that a token was used, at most once a minute. Conditional, so concurrent requests
    write it once; the token's model needs a last_used_at field."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    type(token).objects.filter(stale, pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
