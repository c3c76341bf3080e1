"""Sign-in with the lab's OpenID Connect provider (mozilla-django-oidc), the role from a claim.

Authorization-code flow with PKCE (S256), `state` and `nonce` (mozilla-django-oidc keeps them in
the session and checks them at the callback). The endpoints come from the issuer's discovery
document, fetched at the first sign-in and kept an hour (`oidc_discovery`), never at start-up: a
provider that is down must not stop the portal or its local sign-ins. The ID token's signature
(the provider's JWKS), issuer, audience, expiry and nonce are checked here, not left to defaults.
An account is known by its issuer and subject (never by e-mail, which would let a provider's
user take over a local account with the same address)."""

import datetime as dt
import hashlib
import logging
import re
import threading
import time
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404
from django.shortcuts import resolve_url
from django.utils import timezone
from django.views import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.accounts.directory.forms import login_refused
from portal.accounts.directory.services import (
    REFUSAL_ATTR,
    REVOKED,
    UNAVAILABLE,
    VOUCHED,
    account_event_record,
    client_address,
    directory_identity_owner,
    directory_refresh_token_set,
    directory_user_accept,
    directory_user_may_sign_in,
    directory_user_revoke,
    directory_vouched_set,
    refusal_note,
    role_from_memberships,
    user_role,
)
from portal.accounts.models import AccountEvent, Source

logger = logging.getLogger("portal.accounts.oidc")

DISCOVERY_TTL_S = 3600
# The ID token's exp/iat may be this far off the portal's clock.
CLOCK_LEEWAY_S = 60
RECORDED_ATTR = "portal_signin_recorded"


class ProviderUnavailable(Exception):
    pass


_discovery_lock = threading.Lock()
_discovery: dict[str, tuple[float, dict]] = {}


def oidc_discovery() -> dict:
    """The provider's discovery document (cached DISCOVERY_TTL_S), checked to be for OIDC_ISSUER."""
    issuer = settings.OIDC_ISSUER
    with _discovery_lock:
        cached = _discovery.get(issuer)
        if cached is not None and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
            return cached[1]
    try:
        response = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        logger.warning("OIDC discovery at %s failed: %s", issuer, type(exc).__name__)
        raise ProviderUnavailable("discovery failed") from None
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        logger.warning("OIDC discovery at %s names another issuer; refusing it", issuer)
        raise ProviderUnavailable("issuer mismatch")
    if any(not document.get(key) for key in ("authorization_endpoint", "token_endpoint", "jwks_uri")):
        raise ProviderUnavailable("discovery document incomplete")
    with _discovery_lock:
        _discovery[issuer] = (time.monotonic(), document)
    return document


@receiver(setting_changed)
def _discovery_forget_on_change(*, setting: str, **kwargs) -> None:
    """A provider configured anew (another issuer, client or timeout) is discovered anew."""
    if setting.startswith("OIDC_"):
        with _discovery_lock:
            _discovery.clear()


def _claim_values(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(item) for item in value]
    return [str(value)]


_USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


class PortalOIDCBackend(OIDCAuthenticationBackend):
    source = Source.OIDC

    def __init__(self, *args, **kwargs):
        # Django makes every backend for every sign-in, local ones too: no network here (the
        # endpoints are discovered in authenticate, when a provider's answer is being checked).
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_OP_TOKEN_ENDPOINT = self.OIDC_OP_USER_ENDPOINT = self.OIDC_OP_JWKS_ENDPOINT = None
        self.UserModel = get_user_model()

    def get_user(self, user_id):
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def authenticate(self, request, **kwargs):
        if request is None or "nonce" not in kwargs or not request.GET.get("code") or not request.GET.get("state"):
            return None  # the login form's user name and password are for the other backends
        try:
            self.endpoints_discovered()
        except ProviderUnavailable:
            refusal_note(request, reason="provider_unavailable", source=Source.OIDC)
            return None
        try:
            return super().authenticate(request, **kwargs)
        except requests.HTTPError as exc:
            # The token endpoint refused the code: a wrong PKCE verifier, a code used twice or too
            # late. Its answer is not logged (it may echo what was sent).
            status = exc.response.status_code if exc.response is not None else "?"
            logger.warning("OIDC token endpoint refused the code (HTTP %s)", status)
            refusal_note(request, reason="provider_refused", source=Source.OIDC)
        except (requests.RequestException, ValueError) as exc:
            logger.warning("OIDC provider did not answer: %s", type(exc).__name__)
            refusal_note(request, reason="provider_unavailable", source=Source.OIDC)
        except (SuspiciousOperation, jwt.PyJWTError, KeyError) as exc:
            detail = exc if isinstance(exc, SuspiciousOperation) else type(exc).__name__
            logger.warning("OIDC ID token refused: %s", detail)
            refusal_note(request, reason="token_invalid", source=Source.OIDC)
        return None

    def _verify_jws(self, payload, key):
        """The ID token's signature (only the configured algorithm), issuer, audience, expiry."""
        try:
            claims = jwt.decode(
                payload,
                key,
                algorithms=[self.OIDC_RP_SIGN_ALGO],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=settings.OIDC_ISSUER,
                leeway=CLOCK_LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"ID token refused: {type(exc).__name__}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("ID token refused: issued to another party (azp)")
        return claims

    def verify_token(self, token, **kwargs):
        if not token:
            raise SuspiciousOperation("no ID token in the token endpoint's answer")
        if kwargs.get("nonce") is None:
            raise SuspiciousOperation("no nonce kept for this sign-in")
        return super().verify_token(token, **kwargs)

    def get_token(self, payload):
        # The refresh token (if the provider gives one) is kept at the sign-in, for recheck.
        self.token_answer = super().get_token(payload)
        return self.token_answer

    def endpoints_discovered(self) -> None:
        document = oidc_discovery()
        self.OIDC_OP_TOKEN_ENDPOINT = document["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = document.get("userinfo_endpoint")
        self.OIDC_OP_JWKS_ENDPOINT = document["jwks_uri"]

    def get_userinfo(self, access_token, id_token, payload):
        """The ID token's claims, completed by the userinfo endpoint's for the same subject."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT and access_token:
            userinfo = super().get_userinfo(access_token, id_token, payload)
            if not isinstance(userinfo, dict) or userinfo.get("sub") != payload["sub"]:
                raise SuspiciousOperation("userinfo is about another subject")
            claims.update({k: v for k, v in userinfo.items() if k not in ("iss", "aud", "sub")})
        return claims

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        request = self.request
        directory_id = f"{payload['iss']}|{payload['sub']}"
        role = role_from_memberships(
            memberships=_claim_values(claims.get(settings.OIDC_ROLE_CLAIM)), role_values=settings.OIDC_ROLE_VALUES
        )
        user = directory_identity_owner(source=Source.OIDC, directory_id=directory_id)
        if user is not None:
            reason = directory_user_may_sign_in(user=user, source=Source.OIDC)
            if reason is not None:
                refusal_note(request, reason=reason, source=Source.OIDC)
                raise PermissionDenied(reason)
        if role is None:
            if user is not None:
                directory_user_revoke(user=user, source=Source.OIDC, client=client_address(request))
            request._portal_oidc_username = self._username_wanted(claims)
            refusal_note(request, reason="no_role", source=Source.OIDC)
            raise PermissionDenied("no_role")
        if user is None:
            user = self.UserModel(username=self._username_free(self._username_wanted(claims), directory_id))
            user.set_unusable_password()
        user.first_name = str(claims.get("given_name") or "")[:150]
        user.last_name = str(claims.get("family_name") or "")[:150]
        user.email = str(claims.get("email") or "")[:254]
        user.save()
        directory_user_accept(
            user=user, source=Source.OIDC, directory_id=directory_id, role=role, client=client_address(request)
        )
        refresh_token = str(getattr(self, "token_answer", {}).get("refresh_token") or "")
        if refresh_token:
            until = timezone.now() + dt.timedelta(seconds=settings.LIVE_RECHECK_S)
        else:  # nothing to ask the provider with: its word holds as long as it said
            until = dt.datetime.fromtimestamp(payload["exp"], tz=dt.UTC)
        directory_vouched_set(user=user, until=until, refresh_token=refresh_token)
        return user

    @staticmethod
    def _username_wanted(claims) -> str:
        wanted = claims.get("preferred_username") or str(claims.get("email") or "").split("@")[0]
        return _USERNAME_UNSAFE.sub("", str(wanted))[:120]

    def _username_free(self, wanted: str, directory_id: str) -> str:
        suffix = hashlib.sha256(directory_id.encode()).hexdigest()[:8]
        if wanted and not self.UserModel.objects.filter(username__iexact=wanted).exists():
            return wanted
        return f"{wanted or 'oidc'}-{suffix}"


class OIDCStartView(OIDCAuthenticationRequestView):
    """/oidc/authenticate/: off the provider's login page with a fresh state, nonce and PKCE verifier."""

    def __init__(self, **kwargs):
        View.__init__(self, **kwargs)  # the endpoints are read in get (OIDC may be off)

    def get(self, request):
        if not settings.OIDC_ENABLED:
            raise Http404
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_discovery()["authorization_endpoint"]
        except ProviderUnavailable:
            return login_refused(request, reason="provider_unavailable", status=503)
        return super().get(request)


class OIDCCallbackView(OIDCAuthenticationCallbackView):
    """/oidc/callback/: the provider sends the browser back here with the code and the state."""

    def get(self, request):
        if not settings.OIDC_ENABLED:
            raise Http404
        try:
            return super().get(request)
        except SuspiciousOperation:
            # A state this session never started (a forged or replayed link).
            refusal_note(request, reason="state", source=Source.OIDC)
            return self.login_failure()

    def login_failure(self):
        request = self.request
        if request.GET.get("error"):
            refusal_note(request, reason="provider_refused", source=Source.OIDC)
        refusal_note(request, reason="state", source=Source.OIDC)  # no state kept: nothing was started here
        reason = getattr(request, REFUSAL_ATTR)
        if not getattr(request, RECORDED_ATTR, False):
            account_event_record(
                kind=AccountEvent.Kind.REFUSED, source=Source.OIDC, reason=reason, client=client_address(request)
            )
        status = {"no_role": 403, "inactive": 403, "local_account": 403, "provider_unavailable": 503}.get(reason, 400)
        return login_refused(request, reason=reason, status=status)


def oidc_logout_url(request) -> str | None:
    """Where to send a signed-out OIDC user: the provider's end_session_endpoint, which comes back
    to the login page (RP-initiated logout); None when the provider has none or is down."""
    try:
        endpoint = oidc_discovery().get("end_session_endpoint")
    except ProviderUnavailable:
        return None
    if not endpoint:
        return None
    query = urlencode(
        {
            "client_id": settings.OIDC_RP_CLIENT_ID,
            "post_logout_redirect_uri": request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL)),
        }
    )
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


def _refreshed_claims(backend: PortalOIDCBackend, *, profile) -> dict:
    """The account's claims as the provider gives them now: a refresh grant with the kept refresh
    token, its new ID token checked as at a sign-in (no nonce: none is sent with a refresh), and
    the userinfo endpoint's claims for the same subject. A rotated refresh token is kept."""
    answer = backend.get_token(
        {
            "client_id": backend.OIDC_RP_CLIENT_ID,
            "client_secret": backend.OIDC_RP_CLIENT_SECRET,
            "grant_type": "refresh_token",
            "refresh_token": profile.directory_refresh_token,
        }
    )
    issuer, _, subject = profile.directory_id.rpartition("|")
    id_token = answer.get("id_token")
    if id_token:
        payload = backend._verify_jws(id_token, backend.retrieve_matching_jwk(id_token))
    elif backend.OIDC_OP_USER_ENDPOINT:
        payload = {"iss": issuer, "sub": subject}
    else:
        raise SuspiciousOperation("the refresh answered no ID token and there is no userinfo endpoint")
    if f"{payload['iss']}|{payload['sub']}" != profile.directory_id:
        raise SuspiciousOperation("the refreshed ID token is about another subject")
    claims = backend.get_userinfo(answer.get("access_token"), id_token, payload)
    rotated = answer.get("refresh_token")
    if rotated and rotated != profile.directory_refresh_token:
        directory_refresh_token_set(profile=profile, refresh_token=str(rotated))
    return claims


def oidc_account_recheck(*, user, profile, client: str | None = None) -> str:
    """Ask the provider for the account's role claim again (recheck's verdicts, or a refusal's
    reason: no refresh token to ask with, the provider refused it, its answer failed the checks)."""
    if not profile.directory_refresh_token:
        return "signin_expired"
    backend = PortalOIDCBackend()
    try:
        backend.endpoints_discovered()
        claims = _refreshed_claims(backend, profile=profile)
    except ProviderUnavailable:
        return UNAVAILABLE
    except requests.HTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 500
        logger.warning("OIDC provider answered a refresh for %s with HTTP %s", user.get_username(), status)
        # 400/401: the refresh token or the grant is gone (invalid_grant); 5xx: the provider's trouble.
        return "provider_refused" if 400 <= status < 500 else UNAVAILABLE
    except (requests.RequestException, ValueError) as exc:
        logger.warning("OIDC provider did not answer a refresh: %s", type(exc).__name__)
        return UNAVAILABLE
    except (SuspiciousOperation, jwt.PyJWTError, KeyError) as exc:
        logger.warning("OIDC refresh answer refused: %s", exc if isinstance(exc, SuspiciousOperation) else type(exc))
        return "token_invalid"
    role = role_from_memberships(
        memberships=_claim_values(claims.get(settings.OIDC_ROLE_CLAIM)), role_values=settings.OIDC_ROLE_VALUES
    )
    if role is None:
        directory_user_revoke(user=user, source=Source.OIDC, client=client)
        return REVOKED
    if user_role(user) != role:
        directory_user_accept(
            user=user, source=Source.OIDC, directory_id=profile.directory_id, role=role, client=client
        )
    return VOUCHED
