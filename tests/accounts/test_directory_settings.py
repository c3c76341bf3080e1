"""LDAP_* and OIDC_* as portal-api-v1.md names them: defaults, and a bad value that stops the start
naming the variable."""

import json
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.directory_settings import directory_settings, ldap_settings, oidc_settings
from tests.portal_process import REPO

LDAP = {
    "LDAP_SERVER_URI": "ldap://ldap.lab.example",
    "LDAP_USER_SEARCH_BASE": "ou=people,dc=lab,dc=example",
    "LDAP_ROLE_GROUPS": "admin=cn=admins,ou=groups,dc=lab,dc=example;viewer=cn=users,ou=groups,dc=lab,dc=example",
}
OIDC = {
    "OIDC_ISSUER": "https://sso.lab.example/realms/lab/",
    "OIDC_CLIENT_ID": "portal",
    "OIDC_ROLE_VALUES": "viewer=u",
}


def test_both_off_by_default():
    values = directory_settings({})
    assert values["LDAP_ENABLED"] is False and values["OIDC_ENABLED"] is False
    assert values["OIDC_ROLE_CLAIM"] == "groups"


def test_ldap_defaults():
    values = ldap_settings(LDAP)
    assert values["LDAP_START_TLS"] is True and values["AUTH_LDAP_START_TLS"] is True
    assert values["AUTH_LDAP_USER_SEARCH"].filterstr == "(uid=%(user)s)"
    assert values["LDAP_ROLE_GROUPS"] == {
        "admin": "cn=admins,ou=groups,dc=lab,dc=example",
        "viewer": "cn=users,ou=groups,dc=lab,dc=example",
    }
    assert values["LDAP_SYNC_MINUTES"] == 15
    # The role groups' membership is searched under the deepest entry above them all.
    assert values["LDAP_GROUP_SEARCH_BASE"] == "ou=groups,dc=lab,dc=example"
    assert values["AUTH_LDAP_GROUP_SEARCH"].base_dn == "ou=groups,dc=lab,dc=example"


@pytest.mark.parametrize(
    ("groups", "base"),
    [("admin=cn=a,ou=groups,dc=lab", "ou=groups,dc=lab"),
     ("admin=cn=a,ou=groups,dc=lab;viewer=cn=b,cn=Users,DC=lab", "dc=lab"),
     ("admin=cn=a,ou=gpu,ou=groups,dc=lab;viewer=cn=b,OU=Groups,dc=lab", "ou=groups,dc=lab")],
)  # fmt: skip
def test_the_group_search_base_is_above_every_role_group(groups, base):
    assert ldap_settings({**LDAP, "LDAP_ROLE_GROUPS": groups})["LDAP_GROUP_SEARCH_BASE"].lower() == base


@pytest.mark.parametrize(
    ("uri", "start_tls"),
    [("ldaps://dc1.lab.example", False), ("ldap://127.0.0.1:3890", False), ("ldap://localhost", False),
     ("ldap://[::1]:389", False), ("ldap://ldap.lab.example", True), ("ldaps://a.example ldap://b.example", True)],
)  # fmt: skip
def test_start_tls_unless_ldaps_or_loopback(uri, start_tls):
    assert ldap_settings({**LDAP, "LDAP_SERVER_URI": uri})["LDAP_START_TLS"] is start_tls


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"LDAP_SERVER_URI": "http://ldap.lab.example"}, "LDAP_SERVER_URI"),
        ({"LDAP_USER_SEARCH_BASE": ""}, "LDAP_USER_SEARCH_BASE"),
        ({"LDAP_ROLE_GROUPS": ""}, "LDAP_ROLE_GROUPS"),
        ({"LDAP_ROLE_GROUPS": "owner=cn=x"}, "LDAP_ROLE_GROUPS"),
        ({"LDAP_ROLE_GROUPS": "admin=cn=a;admin=cn=b"}, "LDAP_ROLE_GROUPS"),
        ({"LDAP_ROLE_GROUPS": "admin"}, "LDAP_ROLE_GROUPS"),
        ({"LDAP_USER_FILTER": "(uid=*)"}, "LDAP_USER_FILTER"),
        ({"LDAP_ROLE_GROUPS": "admin=cn=a,dc=lab;viewer=cn=b,dc=example"}, "LDAP_ROLE_GROUPS: the groups share no"),
        ({"LDAP_ROLE_GROUPS": "admin=not a dn"}, "LDAP_ROLE_GROUPS: a group is not a DN"),
    ],
)
def test_a_bad_ldap_value_stops_the_start_naming_it(changes, names):
    with pytest.raises(ImproperlyConfigured, match=names):
        ldap_settings({**LDAP, **changes})


def test_oidc_settings():
    values = oidc_settings(OIDC)
    assert values["OIDC_ISSUER"] == "https://sso.lab.example/realms/lab"
    assert values["OIDC_USE_PKCE"] and values["OIDC_USE_NONCE"] and values["OIDC_RP_SIGN_ALGO"] == "RS256"
    assert values["OIDC_PROVIDER_NAME"] == "sso.lab.example"  # the login button's "Sign in with …"
    assert values["OIDC_ROLE_VALUES"] == {"viewer": "u"}


@pytest.mark.parametrize("issuer", ["http://sso.lab.example", "ftp://sso.lab.example", "http://10.0.0.5"])
def test_the_issuer_must_be_https_except_on_loopback(issuer):
    with pytest.raises(ImproperlyConfigured, match="OIDC_ISSUER"):
        oidc_settings({**OIDC, "OIDC_ISSUER": issuer})
    assert oidc_settings({**OIDC, "OIDC_ISSUER": "http://127.0.0.1:9000"})["OIDC_ENABLED"]


@pytest.mark.parametrize(
    "changes", [{"OIDC_CLIENT_ID": ""}, {"OIDC_ROLE_VALUES": ""}, {"OIDC_ROLE_VALUES": "superuser=x"}]
)
def test_a_bad_oidc_value_stops_the_start(changes):
    with pytest.raises(ImproperlyConfigured, match="OIDC_"):
        oidc_settings({**OIDC, **changes})


def _settings_with(environ: dict) -> dict:
    """portal/settings.py read in a fresh interpreter with these variables."""
    script = (
        "import json, portal.settings as s; print(json.dumps({'beat': sorted(s.CELERY_BEAT_SCHEDULE), "
        "'backends': s.AUTHENTICATION_BACKENDS, "
        "'form_action': s.CONTENT_SECURITY_POLICY['DIRECTIVES']['form-action']}))"
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LDAP_", "OIDC_"))}, "DEBUG": "true", **environ}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_settings_switch_on_what_each_needs():
    off = _settings_with({})
    assert "accounts-ldap-sync" not in off["beat"] and len(off["backends"]) == 2
    on = _settings_with({**LDAP, **{**OIDC, "OIDC_ISSUER": "https://sso.lab.example/realms/lab"}})
    assert "accounts-ldap-sync" in on["beat"]
    assert on["backends"][-2:] == [
        "portal.accounts.directory.ldap.PortalLDAPBackend",
        "portal.accounts.directory.oidc.PortalOIDCBackend",
    ]
    assert "https://sso.lab.example" in on["form_action"]  # signing out ends at the provider
