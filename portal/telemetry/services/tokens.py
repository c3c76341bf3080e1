"""Host tokens: random, shown once, stored as a SHA-256 hash with a visible prefix."""

import functools
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from portal.core.db import hot_cursor, row_to_models, select_columns
from portal.core.tokens import secret_hash, secret_new, secret_prefix, token_touch
from portal.fleet import selectors as fleet_selectors
from portal.fleet import services as fleet_services
from portal.telemetry.models import HostToken

# The hosts' model as our own foreign key names it (not imported: fleet owns it): the token lookup
# reads its columns in the same hand-written query, and an unknown hostname is its DoesNotExist.
Host = HostToken.host.field.related_model

TOKEN_PREFIX = "gfh_"  # GPU fleet host; lets secret scanners and people recognise it


@dataclass(frozen=True)
class IssuedToken:
    token: str  # the only time the secret exists in clear
    record: HostToken


@transaction.atomic
def host_token_issue(*, hostname: str, label: str = "", created_by=None, create_host: bool = False) -> IssuedToken:
    host = fleet_selectors.hosts().filter(hostname=hostname).first()
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


@transaction.atomic
def host_token_rotate(*, token: HostToken, label: str = "") -> IssuedToken:
    """A new token for the host of `token`, which its agent authenticated with. `token` stays valid
    until the first batch arrives with the new one (host_token_rotation_finish): an agent that
    fails to store the new token keeps working with the old one and may rotate again.

    Rotating again with `token` revokes the tokens an earlier rotation of it issued (never used:
    the agent lost them); rotating with a new token whose predecessor is still pending revokes
    the predecessor (the agent holds the new one)."""
    token = HostToken.objects.select_for_update().select_related("host").get(pk=token.pk)
    now = timezone.now()
    HostToken.objects.filter(replaces=token, revoked_at__isnull=True).update(revoked_at=now, replaces=None)
    if token.replaces_id is not None:
        HostToken.objects.filter(pk=token.replaces_id, revoked_at__isnull=True).update(revoked_at=now)
        HostToken.objects.filter(pk=token.pk).update(replaces=None)
    secret = secret_new(TOKEN_PREFIX)
    record = HostToken.objects.create(
        host=token.host, label=(label or f"rotated from {token.prefix}…")[:100], prefix=secret_prefix(secret),
        secret_hash=secret_hash(secret), replaces=token,
    )  # fmt: skip
    return IssuedToken(token=secret, record=record)


def host_token_rotation_finish(*, token: HostToken) -> None:
    """The first batch arrived with a rotated token: the token it replaces is revoked. Conditional
    updates, so concurrent batches do it once; cheap enough for ingest (it runs once per rotation)."""
    if token.replaces_id is None:
        return
    with transaction.atomic():
        HostToken.objects.filter(pk=token.replaces_id, revoked_at__isnull=True).update(revoked_at=timezone.now())
        HostToken.objects.filter(pk=token.pk).update(replaces=None)
    token.replaces_id = None


def host_token_authenticate(raw_token: str) -> HostToken | None:
    """The live token for this secret, or None. Touches last_used_at at most once a minute."""
    if not raw_token.startswith(TOKEN_PREFIX) or len(raw_token) > 200:
        return None
    with hot_cursor() as cursor:
        cursor.execute(_token_lookup_sql(), [secret_hash(raw_token)])
        row = cursor.fetchone()
    if row is None:
        return None
    token, host = row_to_models(row, HostToken, Host)
    token.host = host
    token_touch(token)
    return token


@functools.cache
def _token_lookup_sql() -> str:
    # Hand-written rather than the ORM: it runs for every ingest batch, and compiling the
    # equivalent queryset cost more CPU than the query itself.
    quote = connection.ops.quote_name
    return (
        f"SELECT {select_columns(HostToken, 't')}, {select_columns(Host, 'h')} "
        f"FROM {quote(HostToken._meta.db_table)} t JOIN {quote(Host._meta.db_table)} h ON h.id = t.host_id "
        "WHERE t.secret_hash = %s AND t.revoked_at IS NULL"
    )
