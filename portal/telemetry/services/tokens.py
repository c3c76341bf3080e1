"""Host tokens: random, shown once, stored as a SHA-256 hash with a visible prefix."""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from portal.core.tokens import secret_hash, secret_new, secret_prefix, token_touch
from portal.fleet import services as fleet_services
from portal.fleet.models import Host
from portal.telemetry.models import HostToken

TOKEN_PREFIX = "gfh_"  # GPU fleet host; lets secret scanners and people recognise it


@dataclass(frozen=True)
class IssuedToken:
    token: str  # the only time the secret exists in clear
    record: HostToken


@transaction.atomic
def host_token_issue(*, hostname: str, label: str = "", created_by=None, create_host: bool = False) -> IssuedToken:
    host = Host.objects.filter(hostname=hostname).first()
    if host is None:
        if not create_host:
            raise Host.DoesNotExist(f"No host named {hostname!r}")
        host = fleet_services.host_create(hostname=hostname)
    secret = secret_new(TOKEN_PREFIX)
    record = HostToken.objects.create(
        host=host, label=label[:100], prefix=secret_prefix(secret), secret_hash=secret_hash(secret),
        created_by=created_by,
    )  # fmt: skip
    return IssuedToken(token=secret, record=record)


def host_token_revoke(*, token: HostToken) -> HostToken:
    HostToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token.refresh_from_db()
    return token


def host_token_authenticate(raw_token: str) -> HostToken | None:
    """The live token for this secret, or None. Touches last_used_at at most once a minute."""
    if not raw_token.startswith(TOKEN_PREFIX) or len(raw_token) > 200:
        return None
    token = (
        HostToken.objects.select_related("host")
        .filter(secret_hash=secret_hash(raw_token), revoked_at__isnull=True)
        .first()
    )
    if token is not None:
        token_touch(token)
    return token
