"""Enrolment codes: made by admins, exchanged by a new host's installer for its host token."""

import datetime as dt
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from portal.core.errors import Conflict, InvalidInput, TooManyRequests
from portal.core.tokens import secret_hash, secret_new, secret_prefix
from portal.enrolment.models import EnrolmentAttempt, EnrolmentCode
from portal.fleet import selectors as fleet
from portal.fleet.identifiers import HOSTNAME_RE, HOSTNAME_RULE
from portal.telemetry import selectors as telemetry
from portal.telemetry.services import host_token_issue, host_token_revoke

CODE_PREFIX = "gfe_"  # GPU fleet enrolment
EXPIRES_HOURS_MAX = 720
USES_MAX = 1000
# More refused exchanges than this from one address within the window: 429 until it passes.
REFUSALS_MAX = 20
REFUSAL_WINDOW = dt.timedelta(minutes=10)


@dataclass(frozen=True)
class IssuedCode:
    code: str  # the only time the secret exists in clear
    record: EnrolmentCode


@dataclass(frozen=True)
class Enrolled:
    hostname: str
    token: str


def _check_hostname(hostname: str, loc: str = "hostname") -> str:
    hostname = hostname.strip()
    if not HOSTNAME_RE.match(hostname) or len(hostname) > 253:
        raise InvalidInput("invalid host name", problems=[(loc, f"not a host name: {HOSTNAME_RULE}")])
    return hostname


def enrolment_code_create(*, created_by, hostname: str = "", expires_in_hours: int = 24, uses: int = 1) -> IssuedCode:
    problems = []
    if not 1 <= expires_in_hours <= EXPIRES_HOURS_MAX:
        problems.append(("expires_in_hours", f"between 1 and {EXPIRES_HOURS_MAX}"))
    if not 1 <= uses <= USES_MAX:
        problems.append(("uses", f"between 1 and {USES_MAX}"))
    if problems:
        raise InvalidInput("invalid enrolment code request", problems=problems)
    if hostname:
        hostname = _check_hostname(hostname)
    secret = secret_new(CODE_PREFIX)
    record = EnrolmentCode.objects.create(
        prefix=secret_prefix(secret), secret_hash=secret_hash(secret), hostname=hostname,
        expires_at=timezone.now() + dt.timedelta(hours=expires_in_hours), uses_left=uses, created_by=created_by,
    )  # fmt: skip
    return IssuedCode(code=secret, record=record)


def enrolment_code_revoke(*, code: EnrolmentCode) -> EnrolmentCode:
    if code.revoked_at is None:
        code.revoked_at = timezone.now()
        code.save(update_fields=["revoked_at"])  # through save(): the audit trail records it
    return code


def _refusals(address: str) -> int:
    since = timezone.now() - REFUSAL_WINDOW
    return EnrolmentAttempt.objects.filter(address=address, granted=False, at__gte=since).count()


def enrolment_exchange(*, code: str, hostname: str, address: str) -> Enrolled:
    """A fresh host token for `hostname` (the host is created if new) in exchange for a code.
    A refusal writes nothing but its line in the audit trail, which the rate limit counts."""
    if _refusals(address) >= REFUSALS_MAX:
        raise TooManyRequests(
            f"more than {REFUSALS_MAX} refused enrolments from {address} in {int(REFUSAL_WINDOW.total_seconds() // 60)}"
            " minutes: try again later"
        )
    found = None
    try:
        with transaction.atomic():
            found = EnrolmentCode.objects.select_for_update().filter(secret_hash=secret_hash(code.strip())).first()
            enrolled = _exchange(found, hostname=hostname)
            EnrolmentAttempt.objects.create(address=address, code=found, hostname=enrolled.hostname, granted=True)
            return enrolled
    except (InvalidInput, Conflict) as refused:
        EnrolmentAttempt.objects.create(
            address=address, code=found, hostname=hostname[:253], granted=False, reason=refused.message[:200]
        )
        raise


def _reserved(hostname: str, *, now) -> bool:
    """A live code made for this host name keeps it for itself."""
    return EnrolmentCode.objects.filter(
        hostname=hostname, revoked_at__isnull=True, expires_at__gt=now, uses_left__gt=0
    ).exists()


def _exchange(found: EnrolmentCode | None, *, hostname: str) -> Enrolled:
    now = timezone.now()
    if found is None:
        raise InvalidInput("unknown enrolment code", problems=[("code", "unknown code")])
    if found.revoked_at is not None:
        raise InvalidInput("enrolment code revoked", problems=[("code", "this code was revoked")])
    if found.expires_at <= now:
        raise InvalidInput("enrolment code expired", problems=[("code", "this code has expired")])
    if found.uses_left < 1:
        raise InvalidInput("enrolment code used up", problems=[("code", "this code has been used up")])
    hostname = _check_hostname(hostname)
    if found.hostname and found.hostname != hostname:
        raise InvalidInput(
            "enrolment code made for another host", problems=[("hostname", f"this code enrols {found.hostname} only")]
        )
    if not found.hostname and _reserved(hostname, now=now):
        raise InvalidInput(
            "host name reserved for another enrolment code",
            problems=[("hostname", f"{hostname} is bound to another enrolment code: use that one")],
        )
    host = fleet.hosts().filter(hostname=hostname).first()
    if host is not None and found.hostname != hostname:
        # A code for "any host" enrols new host names only: taking over an existing host (even one
        # whose token was revoked) would hand its record, its tickets and its Slurm node to whoever
        # holds the code. Only a code an admin made for that host name replaces its token.
        live = telemetry.tokens_live().filter(host=host).exists()
        raise Conflict(
            f"host {hostname} already exists"
            + (" and has an active token" if live else "")
            + ": an admin makes a code for this host name to enrol it again",
            problems=[("hostname", "already taken by an existing host")],
        )
    live = list(telemetry.tokens_live().filter(host=host)) if host else []
    for token in live:  # a code made for this host replaces its token
        host_token_revoke(token=token)
    # Conditional, so two exchanges of the last use cannot both pass.
    if not EnrolmentCode.objects.filter(pk=found.pk, uses_left__gt=0).update(uses_left=F("uses_left") - 1):
        raise InvalidInput("enrolment code used up", problems=[("code", "this code has been used up")])
    issued = host_token_issue(hostname=hostname, label="enrolment", created_by=found.created_by, create_host=True)
    return Enrolled(hostname=hostname, token=issued.token)
