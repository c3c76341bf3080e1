"""A real LDAP directory (Debian's slapd, started by the tests on a free loopback port) and the
portal's settings pointed at it exactly as portal/settings.py would from LDAP_* variables."""

import pytest

from portal.demo.directory import DEMO_PEOPLE, directory_running, slapd_available
from portal.directory_settings import ldap_settings
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
