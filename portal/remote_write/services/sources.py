"""Ingest sources: issued with a token shown once and stored hashed, revocable, each limited to a
hostname pattern (prometheus-v1.md, "Sources")."""

import functools
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from portal.core.db import hot_cursor, row_to_models, select_columns
from portal.core.errors import Conflict, InvalidInput
from portal.core.tokens import secret_hash, secret_new, secret_prefix
from portal.remote_write.models import IngestSource

TOKEN_PREFIX = "gfs_"  # GPU fleet source; tells it apart from a host token (gfh_)
_PATTERN_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_*?[]!")


@dataclass(frozen=True)
class IssuedSource:
    token: str  # the only time the secret exists in clear
    record: IngestSource


def _checked(name: str, hosts: str) -> tuple[str, str]:
    name, hosts = name.strip(), hosts.strip()
    problems = []
    if not name or len(name) > 100 or "\x00" in name:
        problems.append(("name", "1 to 100 characters"))
    if not hosts or len(hosts) > 253 or not set(hosts) <= _PATTERN_CHARACTERS:
        problems.append(
            ("hosts", "a shell-style pattern of hostnames: letters, digits, '.', '-', '_', '*', '?', '[...]'")
        )
    if problems:
        raise InvalidInput("invalid ingest source", problems=problems)
    return name, hosts


def ingest_source_issue(*, name: str, hosts: str, created_by=None) -> IssuedSource:
    name, hosts = _checked(name, hosts)
    secret = secret_new(TOKEN_PREFIX)
    try:
        with transaction.atomic():
            record = IngestSource.objects.create(
                name=name, hosts=hosts, prefix=secret_prefix(secret), secret_hash=secret_hash(secret),
                created_by=created_by,
            )  # fmt: skip
    except IntegrityError:
        raise Conflict(f"a source named {name!r} exists", problems=[("name", "taken")]) from None
    return IssuedSource(token=secret, record=record)


def ingest_source_revoke(*, source: IngestSource) -> IngestSource:
    IngestSource.objects.filter(pk=source.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    source.refresh_from_db()
    return source


def ingest_source_authenticate(raw_token: str) -> IngestSource | None:
    """The live source for this secret, or None."""
    if not raw_token.startswith(TOKEN_PREFIX) or len(raw_token) > 200:
        return None
    with hot_cursor() as cursor:
        cursor.execute(_lookup_sql(), [secret_hash(raw_token)])
        row = cursor.fetchone()
    return None if row is None else row_to_models(row, IngestSource)[0]


@functools.cache
def _lookup_sql() -> str:
    # Hand-written rather than the ORM: it runs for every write (as the agents' token lookup).
    table = connection.ops.quote_name(IngestSource._meta.db_table)
    return (
        f"SELECT {select_columns(IngestSource, 's')} FROM {table} s WHERE s.secret_hash = %s AND s.revoked_at IS NULL"
    )
