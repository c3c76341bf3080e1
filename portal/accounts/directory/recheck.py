"""A directory account's role asked again while it is signed in (portal-api-v1.md, "Sign-in for lab
accounts": a lost role ends its sessions within LIVE_RECHECK_S and stops its tokens at once).

Each sign-in is vouched for by the directory until a time (UserProfile.directory_vouched_until);
the first request after it, from a session (DirectoryRecheckMiddleware), a personal token
(api_token_authenticate) or a live socket, asks the directory again, as a sign-in would but
without the user: LDAP by searching the account's groups with the service account, OIDC with
the refresh token the provider gave at the sign-in.

Why the refresh token for OIDC, and not mozilla-django-oidc's SessionRefresh middleware or short
sessions: SessionRefresh re-runs the sign-in in the browser (a redirect to the provider with
prompt=none), so it can only act on a page load, never on a script's token, an XHR or a socket,
and every LIVE_RECHECK_S would be a trip through the provider; a short session asks the user to
sign in again all day and does nothing for tokens either. A refresh is one server-to-server call
that re-reads the role claim for sessions and tokens alike. A provider that gives no refresh
token is asked nothing: its sign-in holds only as long as its ID token says (then sign in again).

A directory that does not answer changes nothing (as `directory_sync` does): an outage must not
sign the whole lab out. A provider that refuses the refresh token no longer vouches for the
account: its sessions end and its tokens are refused until it signs in again (not revoked: the
role may be intact). Each refusal is in the audit trail."""

import datetime as dt
import logging
import math

from django.conf import settings
from django.utils import timezone

from portal.accounts.directory.services import REVOKED, UNAVAILABLE, VOUCHED, account_event_record
from portal.accounts.models import AccountEvent, Source, UserProfile

logger = logging.getLogger("portal.accounts.directory")

# The session's copy of the account's vouched-until time (epoch seconds), so that a request in the
# window costs no query; LOCAL_MARK for a local account, which no directory vouches for.
SESSION_VOUCHED_KEY = "portal_directory_vouched_until"
LOCAL_MARK = "local"


def _checker(source: str):
    # Imported here: the OIDC client (requests, PyJWT) is a tenth of a start of a process that
    # never signs anyone in (the worker, a management command), and python-ldap is an optional
    # extra, needed only where LDAP accounts exist.
    if source == Source.OIDC:
        from portal.accounts.directory.oidc import oidc_account_recheck

        return oidc_account_recheck
    from portal.accounts.directory.ldap import ldap_account_recheck

    return ldap_account_recheck


def _profile_of(user) -> UserProfile | None:
    try:
        return user.profile  # select_related by the token lookup, else one query
    except UserProfile.DoesNotExist:
        return None


def directory_account_recheck(*, user, client: str | None = None) -> float | None:
    """Until when (epoch seconds; math.inf for a local account) `user` may act on what its
    directory last said, asking it again first when that is older than LIVE_RECHECK_S; None when
    it may not (no role any more, or the provider no longer vouches for it)."""
    profile = _profile_of(user)
    if profile is None or profile.source == Source.LOCAL:
        return math.inf
    now = timezone.now()
    until = profile.directory_vouched_until
    if until is not None and until > now:
        return until.timestamp()
    window = now + dt.timedelta(seconds=settings.LIVE_RECHECK_S)
    # One request asks (several sessions and tokens of one account arrive together; a refresh
    # token may be rotated by each use); the others go on with the verdict in force.
    claimed = UserProfile.objects.filter(pk=profile.pk, directory_vouched_until=until).update(
        directory_vouched_until=window
    )
    if not claimed:
        return window.timestamp()
    verdict = _checker(profile.source)(user=user, profile=profile, client=client)
    if verdict in (VOUCHED, UNAVAILABLE):
        return window.timestamp()
    if verdict != REVOKED:  # the reason the directory no longer vouches for the account
        UserProfile.objects.filter(pk=profile.pk).update(directory_vouched_until=None)
        account_event_record(
            kind=AccountEvent.Kind.REFUSED, source=profile.source, user=user, reason=verdict, client=client
        )
        logger.warning("%s account %s signed out: %s", profile.source, user.get_username(), verdict)
    return None


def session_vouched_mark(*, user) -> float | str:
    """What a new session of `user` keeps as its copy (see SESSION_VOUCHED_KEY), read afresh: the
    sign-in has just set it."""
    row = UserProfile.objects.filter(user=user).values_list("source", "directory_vouched_until").first()
    if row is None or row[0] == Source.LOCAL:
        return LOCAL_MARK
    return session_mark_after_check(row[1].timestamp()) if row[1] is not None else 0.0


def session_mark_after_check(until: float) -> float | str:
    """The session asks again at the account's vouched-until time, and at least every LIVE_RECHECK_S
    (another session of the account may have learnt something meanwhile)."""
    if until == math.inf:
        return LOCAL_MARK
    return min(until, timezone.now().timestamp() + settings.LIVE_RECHECK_S)
