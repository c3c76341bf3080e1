"""A real LDAP directory (Debian's slapd) and a real OpenID provider (the oidc-provider npm
package), each started by the tests on a free loopback port, and the portal's settings pointed at
them exactly as portal/settings.py would from the LDAP_* / OIDC_* variables."""

import contextlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from portal.demo.directory import DEMO_PEOPLE, directory_running, free_port, slapd_available
from portal.directory_settings import ldap_settings, oidc_settings
from tests.conftest import skip_or_fail

LDAP_BACKEND = "portal.accounts.directory.ldap.PortalLDAPBackend"


@pytest.fixture(scope="session")
def directory():
    if not slapd_available():
        skip_or_fail("slapd and ldap-utils are not installed (apt-get install slapd ldap-utils)")
    with directory_running() as running:
        yield running


def ldap_configure(settings, environ: dict) -> None:
    for name, value in ldap_settings(environ).items():
        setattr(settings, name, value)
    if LDAP_BACKEND not in settings.AUTHENTICATION_BACKENDS:
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, LDAP_BACKEND]


@pytest.fixture
def ldap_on(settings, directory):
    """The portal signs in directory users; every role group holds its DEMO_PEOPLE again."""
    for role in ("admin", "technician", "viewer"):
        directory.member_set(role, [name for name, person in DEMO_PEOPLE.items() if person[3] == role])
    ldap_configure(settings, directory.settings())
    return directory


# --- OpenID Connect ------------------------------------------------------------------------

OIDC_BACKEND = "portal.accounts.directory.oidc.PortalOIDCBackend"
OIDC_CLIENT_SECRET = "portal-client-secret-for-tests-only"
# The test provider's people: id -> (password, groups).
OIDC_PEOPLE = {
    "alice": ("alice-pw-1", ["lab-staff", "portal-admins"]),
    "terry": ("terry-pw-1", ["portal-techs"]),
    "vera": ("vera-pw-1", ["portal-viewers"]),
    "olga": ("olga-pw-1", ["lab-staff"]),
}
OIDC_ROLE_VALUES = "admin=portal-admins;technician=portal-techs;viewer=portal-viewers"


class TestProvider:
    def __init__(self, issuer, people_file, process):
        self.issuer, self.people_file, self.process = issuer, people_file, process
        self.people_reset()

    def people_reset(self):
        self.people = {
            name: {
                "password": password,
                "groups": groups,
                "email": f"{name}@lab.example",
                "given_name": name.title(),
                "family_name": "Tester",
            }
            for name, (password, groups) in OIDC_PEOPLE.items()
        }
        self.people_file.write_text(json.dumps(self.people))

    def groups_set(self, name, groups):
        self.people[name]["groups"] = groups
        self.people_file.write_text(json.dumps(self.people))

    def environ(self, **extra) -> dict:
        return {
            "OIDC_ISSUER": self.issuer,
            "OIDC_CLIENT_ID": "portal",
            "OIDC_CLIENT_SECRET": OIDC_CLIENT_SECRET,
            "OIDC_ROLE_VALUES": OIDC_ROLE_VALUES,
            "OIDC_SCOPES": "openid email profile groups",
            **extra,
        }


def node_provider_available() -> bool:
    return bool(shutil.which("node")) and (Path(__file__).parents[2] / "node_modules" / "oidc-provider").exists()


@contextlib.contextmanager
def oidc_provider_running(
    folder: Path, *, redirect_uris: list[str], post_logout_redirect_uris: list[str], port: int | None = None
):
    port = port or free_port()
    issuer = f"http://127.0.0.1:{port}"
    people_file = folder / "people.json"
    people_file.write_text("{}")
    config = folder / "provider.json"
    config.write_text(
        json.dumps(
            {
                "issuer": issuer,
                "port": port,
                "client_id": "portal",
                "client_secret": OIDC_CLIENT_SECRET,
                "redirect_uris": redirect_uris,
                "post_logout_redirect_uris": post_logout_redirect_uris,
                "people_file": str(people_file),
            }
        )
    )
    script = Path(__file__).parents[1] / "oidc_provider" / "provider.mjs"
    process = subprocess.Popen(
        ["node", str(script), str(config)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        line = process.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"the test OIDC provider did not start: {line!r}")
        yield TestProvider(issuer, people_file, process)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory):
    if not node_provider_available():
        skip_or_fail("node and the oidc-provider npm package are needed (npm ci)")
    with oidc_provider_running(
        tmp_path_factory.mktemp("oidc"),
        redirect_uris=["http://testserver/oidc/callback/"],
        post_logout_redirect_uris=["http://testserver/login/"],
    ) as provider:
        yield provider


def oidc_configure(settings, environ: dict) -> None:
    """The OIDC settings of `environ` on pytest-django's `settings` (each change makes the portal
    forget the provider's discovery document, as any change of OIDC_* settings does)."""
    for name, value in oidc_settings(environ).items():
        setattr(settings, name, value)
    if OIDC_BACKEND not in settings.AUTHENTICATION_BACKENDS:
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, OIDC_BACKEND]


@pytest.fixture
def oidc_on(settings, oidc_provider):
    oidc_provider.people_reset()
    oidc_configure(settings, oidc_provider.environ())
    yield oidc_provider
