"""The settings of lab accounts (LDAP, OIDC) from environment variables, as one function so that
the tests configure a directory exactly as portal/settings.py does (portal-api-v1.md, "Sign-in
for lab accounts"). A bad value fails loudly, naming the variable."""

import importlib
import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

# The roles in the order "the highest that matches" reads them (portal.accounts.roles.ROLES).
DIRECTORY_ROLES = ("admin", "technician", "viewer")
# A directory that does not answer fails the sign-in within 5 s: 2 s to connect, 2 s per operation.
LDAP_TIMEOUT_S = 2
# Beat reads every LDAP account's groups again this often (`manage.py directory_sync`: now).
LDAP_SYNC_MINUTES = 15


def ldap_packages_missing() -> str | None:
    """Why LDAP sign-in cannot work here, or None: python-ldap and django-auth-ldap are an optional
    extra (requirements-ldap.txt), which a lab without a directory need not build."""
    for module, package in (("ldap", "python-ldap"), ("django_auth_ldap", "django-auth-ldap")):
        try:
            importlib.import_module(module)
        except ImportError as error:  # not installed, or built against a libldap that is gone
            return (
                f"{package} cannot be imported ({error}): "
                "pip install -r requirements-ldap.txt (python-ldap builds against Debian's libldap2-dev "
                "and libsasl2-dev)"
            )
    return None


def is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def role_mapping(environ: Mapping[str, str], name: str) -> dict[str, str]:
    """`role=value;role=value` (LDAP_ROLE_GROUPS, OIDC_ROLE_VALUES): known roles, each once, each
    with a value. Values may hold commas and `=` (a group DN does), not `;`."""
    mapping: dict[str, str] = {}
    for item in environ.get(name, "").split(";"):
        if not item.strip():
            continue
        role, sep, value = item.partition("=")
        role, value = role.strip(), value.strip()
        if not sep or not value:
            raise ImproperlyConfigured(f"{name}: {item.strip()!r} is not role=value (entries separated by ';')")
        if role not in DIRECTORY_ROLES:
            raise ImproperlyConfigured(f"{name}: {role!r} is not one of {', '.join(DIRECTORY_ROLES)}")
        if role in mapping:
            raise ImproperlyConfigured(f"{name}: {role!r} is given twice")
        mapping[role] = value
    return mapping


def group_search_base(group_dns: list[str]) -> str:
    """The deepest entry above every role group (their common suffix), where their membership is
    searched: `cn=gpu-admins,ou=groups,dc=lab` and `cn=gpu-users,ou=groups,dc=lab` give
    `ou=groups,dc=lab`."""
    import ldap.dn

    try:
        parsed = [list(reversed(ldap.dn.str2dn(dn))) for dn in group_dns]
    except ldap.DECODING_ERROR:
        raise ImproperlyConfigured(
            "LDAP_ROLE_GROUPS: a group is not a DN (e.g. cn=gpu-admins,ou=groups,dc=lab,dc=example)"
        ) from None
    common = []
    for rdns in zip(*(rdns[:-1] for rdns in parsed), strict=False):  # a group's parent at the deepest
        if len({str(rdn).lower() for rdn in rdns}) > 1:  # DNs compare without regard to case
            break
        common.append(rdns[0])
    if not common:
        raise ImproperlyConfigured("LDAP_ROLE_GROUPS: the groups share no entry above them to search under")
    return ldap.dn.dn2str(list(reversed(common)))


def ldap_settings(environ: Mapping[str, str]) -> dict:
    """LDAP_* → django-auth-ldap's AUTH_LDAP_* (and the portal's own LDAP_*)."""
    uri = environ.get("LDAP_SERVER_URI", "").strip()
    if not uri:
        return {"LDAP_ENABLED": False, "LDAP_ROLE_GROUPS": {}, "LDAP_SYNC_MINUTES": 0}
    missing = ldap_packages_missing()
    if missing:
        raise ImproperlyConfigured(f"LDAP_SERVER_URI is set, but {missing}")
    import ldap
    from django_auth_ldap.config import LDAPSearch, MemberDNGroupType

    uris = uri.split()
    for each in uris:
        if urlsplit(each).scheme not in ("ldap", "ldaps"):
            raise ImproperlyConfigured(f"LDAP_SERVER_URI: {each!r} is not an ldap:// or ldaps:// URI")
    user_base = environ.get("LDAP_USER_SEARCH_BASE", "").strip()
    user_filter = environ.get("LDAP_USER_FILTER", "").strip() or "(uid=%(user)s)"
    role_groups = role_mapping(environ, "LDAP_ROLE_GROUPS")
    for name, value in (("LDAP_USER_SEARCH_BASE", user_base), ("LDAP_ROLE_GROUPS", role_groups)):
        if not value:
            raise ImproperlyConfigured(f"{name} must be set when LDAP_SERVER_URI is")
    group_base = group_search_base(list(role_groups.values()))
    if "%(user)s" not in user_filter:
        raise ImproperlyConfigured("LDAP_USER_FILTER must contain %(user)s, where the typed user name goes")
    # StartTLS unless the connection is TLS already (ldaps://) or never leaves the machine: the
    # bind password never crosses the network in clear.
    start_tls = not all(urlsplit(u).scheme == "ldaps" or is_loopback_host(urlsplit(u).hostname or "") for u in uris)
    global_options = {ldap.OPT_X_TLS_REQUIRE_CERT: ldap.OPT_X_TLS_DEMAND}
    if environ.get("LDAP_CA_FILE"):
        global_options[ldap.OPT_X_TLS_CACERTFILE] = environ["LDAP_CA_FILE"]
    return {
        "LDAP_ENABLED": True,
        "LDAP_SERVER_URI": uri,
        "LDAP_START_TLS": start_tls,
        "LDAP_ROLE_GROUPS": role_groups,
        "LDAP_USER_SEARCH_BASE": user_base,
        "LDAP_USER_FILTER": user_filter,
        "LDAP_GROUP_SEARCH_BASE": group_base,
        "LDAP_SYNC_MINUTES": LDAP_SYNC_MINUTES,
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_BIND_DN": environ.get("LDAP_BIND_DN", ""),
        "AUTH_LDAP_BIND_PASSWORD": environ.get("LDAP_BIND_PASSWORD", ""),
        "AUTH_LDAP_START_TLS": start_tls,
        "AUTH_LDAP_USER_SEARCH": LDAPSearch(user_base, ldap.SCOPE_SUBTREE, user_filter),
        # groupOfNames (OpenLDAP) and Active Directory's group both list their members by DN in `member`.
        "AUTH_LDAP_GROUP_SEARCH": LDAPSearch(group_base, ldap.SCOPE_SUBTREE, "(objectClass=*)"),
        "AUTH_LDAP_GROUP_TYPE": MemberDNGroupType(member_attr="member"),
        "AUTH_LDAP_USER_ATTR_MAP": {"first_name": "givenName", "last_name": "sn", "email": "mail"},
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_CACHE_TIMEOUT": 0,  # the groups are read again at every sign-in
        "AUTH_LDAP_CONNECTION_OPTIONS": {
            ldap.OPT_NETWORK_TIMEOUT: LDAP_TIMEOUT_S,
            ldap.OPT_TIMEOUT: LDAP_TIMEOUT_S,
            ldap.OPT_REFERRALS: 0,  # Active Directory's referrals would need credentials of their own
        },
        "AUTH_LDAP_GLOBAL_OPTIONS": global_options,
    }


def oidc_settings(environ: Mapping[str, str]) -> dict:
    """OIDC_* → mozilla-django-oidc's settings (the endpoints are discovered at the first sign-in)."""
    issuer = environ.get("OIDC_ISSUER", "").strip().rstrip("/")
    common = {
        "OIDC_ISSUER": issuer,
        "OIDC_ENABLED": bool(issuer),
        # The login page's button, "Sign in with sso.lab.example": the name people see at the provider.
        "OIDC_PROVIDER_NAME": urlsplit(issuer).hostname or "single sign-on",
        "OIDC_ROLE_CLAIM": environ.get("OIDC_ROLE_CLAIM", "").strip() or "groups",
    }
    if not issuer:
        return {**common, "OIDC_ROLE_VALUES": {}}
    parts = urlsplit(issuer)
    if not (parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(parts.hostname or ""))):
        raise ImproperlyConfigured("OIDC_ISSUER must be an https:// URL (http:// only on a loopback address)")
    client_id = environ.get("OIDC_CLIENT_ID", "").strip()
    role_values = role_mapping(environ, "OIDC_ROLE_VALUES")
    if not client_id or not role_values:
        raise ImproperlyConfigured("OIDC_CLIENT_ID and OIDC_ROLE_VALUES must be set when OIDC_ISSUER is")
    return {
        **common,
        "OIDC_ROLE_VALUES": role_values,
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": environ.get("OIDC_CLIENT_SECRET", ""),
        "OIDC_RP_SCOPES": environ.get("OIDC_SCOPES", "").strip() or "openid email profile",
        "OIDC_RP_SIGN_ALGO": "RS256",
        "OIDC_USE_PKCE": True,
        "OIDC_USE_NONCE": True,
        "OIDC_TIMEOUT": 5,
        "OIDC_CREATE_USER": True,
        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_authentication_callback",
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "discovered",  # mozilla-django-oidc asks; ours come from discovery
        "OIDC_OP_TOKEN_ENDPOINT": "discovered",
        "OIDC_OP_USER_ENDPOINT": "discovered",
    }


def directory_settings(environ: Mapping[str, str]) -> dict:
    return {**ldap_settings(environ), **oidc_settings(environ)}
