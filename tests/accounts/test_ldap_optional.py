"""LDAP sign-in is an optional extra (requirements-ldap.txt): a portal without python-ldap and
django-auth-ldap imports and serves while LDAP_SERVER_URI is unset, and refuses to start with a
message naming the variable and the file when it is set. The packages' absence is simulated in
a fresh Python whose import of `ldap` or `django_auth_ldap` fails as it does when they are not
installed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

NO_LDAP = """
import sys


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"ldap", "_ldap", "django_auth_ldap"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
"""

# Every module of the portal imported (the LDAP backend itself aside: the settings name it only
# with LDAP on), Django's system checks run, then the login page and the health check served.
IMPORT_AND_SERVE = """
import importlib
import pkgutil
import sys

import django

django.setup()
import portal

LDAP_BACKEND = "portal.accounts.directory.ldap"
failed = []
for module in pkgutil.walk_packages(portal.__path__, "portal."):
    if module.name == LDAP_BACKEND or ".migrations." in module.name:
        continue
    try:
        importlib.import_module(module.name)
    except Exception as error:
        failed.append(f"{module.name}: {error!r}")
print("failed:", failed)
from django.core.management import call_command
from django.test import Client
from django.test.utils import setup_test_environment

call_command("check")  # the system checks, the URL configuration's views among them
setup_test_environment()
client = Client()
print("login:", client.get("/login/").status_code, "healthz:", client.get("/healthz").status_code)
print("ldap loaded:", sorted(name for name in sys.modules if name.split(".")[0] in {"ldap", "django_auth_ldap"}))
"""

LDAP_ENV = {
    "LDAP_SERVER_URI": "ldap://127.0.0.1:389",
    "LDAP_USER_SEARCH_BASE": "ou=people,dc=lab,dc=example",
    "LDAP_ROLE_GROUPS": "viewer=cn=gpu-users,ou=groups,dc=lab,dc=example",
}


@pytest.fixture
def without_ldap(tmp_path):
    """Run a Python command of the portal's, in the repository, as on a machine without the extra."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(NO_LDAP)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("LDAP_", "OIDC_", "REDIS_"))}
    env.update(
        PYTHONPATH=str(blocker),
        DJANGO_SETTINGS_MODULE="portal.settings",
        DEBUG="true",
        VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{tmp_path}/portal.sqlite3",
    )

    def run(*arguments: str, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *arguments],
            cwd=REPO,
            env={**env, **extra_env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


def test_the_blocker_hides_the_packages(without_ldap):
    result = without_ldap("-c", "import ldap")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: No module named 'ldap'"


def test_without_ldap_set_the_portal_imports_checks_and_serves_without_the_packages(without_ldap):
    result = without_ldap("-c", IMPORT_AND_SERVE)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "failed: []",
        "System check identified no issues (0 silenced).",
        "login: 200 healthz: 200",
        "ldap loaded: []",
    ]


def test_with_ldap_set_and_the_packages_missing_the_portal_refuses_to_start_naming_what_to_install(without_ldap):
    result = without_ldap("manage.py", "check", **LDAP_ENV)

    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(
        "django.core.exceptions.ImproperlyConfigured: LDAP_SERVER_URI is set, but python-ldap cannot be imported"
    ), result.stderr[-2000:]
    assert "pip install -r requirements-ldap.txt" in last_line
    assert "libldap2-dev" in last_line


def test_the_ldap_demo_without_the_packages_says_what_to_install(without_ldap):
    result = without_ldap("manage.py", "demo", "--ldap", "--no-agents", "--skip-checks")

    assert result.returncode == 1
    assert "--ldap: python-ldap cannot be imported" in result.stderr
    assert "pip install -r requirements-ldap.txt" in result.stderr


def test_the_ldap_packages_are_their_own_requirements_file_which_the_developers_install():
    def requirements(name: str) -> list[str]:
        lines = (REPO / name).read_text().splitlines()
        return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]

    ldap_pins = requirements("requirements-ldap.txt")
    assert sorted(pin.split("==")[0] for pin in ldap_pins) == ["django-auth-ldap", "python-ldap"]
    assert all("==" in pin for pin in ldap_pins)
    assert not {pin.split("==")[0] for pin in requirements("requirements.txt")} & {"python-ldap", "django-auth-ldap"}
    assert "-r requirements-ldap.txt" in requirements("requirements-dev.txt")
    stamp_rule = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("$(STAMP):"))
    assert "requirements-ldap.txt" in stamp_rule
