"""Settings come from the environment through helpers that fail loudly on a bad value."""

import os
import secrets
import string
import subprocess
import sys
from pathlib import Path

import pytest

from portal.env import ConfigError, env_email_url, env_trust_proxy, envbool, envfloat, envint, envlist, envstr

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("TRUE", True), (" yes ", True), ("on", True),
                                            ("0", False), ("false", False), ("No", False), ("off", False)])  # fmt: skip
def test_envbool_reads_the_usual_spellings(raw, value, monkeypatch):
    monkeypatch.setenv("X_FLAG", raw)
    assert envbool("X_FLAG", not value) is value


@pytest.mark.parametrize("raw", ["maybe", "2", "tru", "enabled"])
def test_envbool_rejects_anything_else(raw, monkeypatch):
    monkeypatch.setenv("X_FLAG", raw)
    with pytest.raises(ConfigError, match="X_FLAG must be a boolean"):
        envbool("X_FLAG", False)


def test_unset_or_empty_gives_the_default(monkeypatch):
    monkeypatch.delenv("X_UNSET", raising=False)
    assert envbool("X_UNSET", True) is True
    assert envint("X_UNSET", 7) == 7
    assert envlist("X_UNSET", ["a"]) == ["a"]
    assert envstr("X_UNSET", "d") == "d"
    monkeypatch.setenv("X_UNSET", "")
    assert envbool("X_UNSET", False) is False
    assert envint("X_UNSET", 7) == 7
    monkeypatch.setenv("X_UNSET", "  ")
    assert envlist("X_UNSET", ["a"]) == ["a"]


def test_envint(monkeypatch):
    monkeypatch.setenv("X_INT", "-42")
    assert envint("X_INT", 0) == -42
    for raw in ("12.5", "ten", "1e3", "0x10"):
        monkeypatch.setenv("X_INT", raw)
        with pytest.raises(ConfigError, match=f"X_INT must be an integer, got '{raw}'"):
            envint("X_INT", 0)


def test_envfloat(monkeypatch):
    monkeypatch.setenv("X_FLOAT", "0.5")
    assert envfloat("X_FLOAT", 20) == 0.5
    monkeypatch.setenv("X_FLOAT", "3")
    assert envfloat("X_FLOAT", 20) == 3.0
    for raw in ("fast", "nan", "inf", "0,5"):
        monkeypatch.setenv("X_FLOAT", raw)
        with pytest.raises(ConfigError, match="X_FLOAT must be a"):
            envfloat("X_FLOAT", 0)


def test_envlist_splits_on_commas_and_drops_blanks(monkeypatch):
    monkeypatch.setenv("X_LIST", " portal.example.org, ,localhost,")
    assert envlist("X_LIST", []) == ["portal.example.org", "localhost"]


def _environment(tmp_path, env_changes: dict) -> dict:
    unset = {"REDIS_URL", "SECRET_KEY", "DEBUG", "DEMO", "ALLOWED_HOSTS"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(
        {
            "VAR_DIR": str(tmp_path),
            "DATABASE_URL": f"sqlite:///{tmp_path}/check.sqlite3",
            "DJANGO_SETTINGS_MODULE": "portal.settings",  # the portal's own, not the suite's
            **env_changes,
        }
    )
    return {k: v for k, v in env.items() if v is not None}


def _python(*args, tmp_path, env_changes: dict) -> subprocess.CompletedProcess:
    env = _environment(tmp_path, env_changes)
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def manage(*args, tmp_path, **env_changes):
    """Run manage.py in a fresh interpreter with a clean, production-like environment."""
    return _python("manage.py", *args, tmp_path=tmp_path, env_changes=env_changes)


def settings_print(expression: str, *, tmp_path, **env_changes):
    """Print `expression` of django.conf's settings, loaded in a fresh interpreter from the same
    environment as `manage` gives manage.py (the settings module alone: no apps, no checks)."""
    code = f"from django.conf import settings; print({expression})"
    return _python("-c", code, tmp_path=tmp_path, env_changes=env_changes)


def test_production_settings_pass_check_deploy(tmp_path):
    secret = "".join(secrets.choice(string.ascii_letters + string.digits + "!@#%^&*(-_=+)") for _ in range(50))
    result = manage(
        "check", "--deploy", tmp_path=tmp_path, DEBUG="false", SECRET_KEY=secret, ALLOWED_HOSTS="portal.example.org",
        PORTAL_URL="https://portal.example.org",
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNINGS" not in output, output
    assert "System check identified no issues" in output


PRODUCTION = {"DEBUG": "false", "SECRET_KEY": "s" * 50, "ALLOWED_HOSTS": "portal.example.org"}


def test_production_without_portal_url_is_a_deploy_error_and_no_start(tmp_path):
    """Links in notifications, the install command and the OpenAPI servers need the public base
    URL: with DEBUG off, check --deploy names PORTAL_URL and serve and run refuse to start."""
    result = manage("check", "--deploy", tmp_path=tmp_path, **PRODUCTION)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "core.E001" in output and "PORTAL_URL" in output, output
    for command in (["serve", "--port", "0"], ["run", "--no-migrate", "--port", "0"]):
        result = manage(*command, tmp_path=tmp_path, **PRODUCTION)
        assert result.returncode != 0 and "PORTAL_URL is not set" in result.stderr, result.stderr
        assert "serving on" not in result.stdout and not (tmp_path / "locale").exists()
    # DEBUG on (development, the demo): not needed, links go to the address asked.
    result = manage("check", "--deploy", tmp_path=tmp_path, DEBUG="true")
    assert "core.E001" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "value",
    ["gpu-portal.lab.example", "ftp://gpu-portal.lab.example", "https://gpu-portal.lab.example/portal",
     "https://gpu-portal.lab.example/?next=x", "https://", "https://host:port"],
)  # fmt: skip
def test_a_portal_url_that_is_not_a_base_url_stops_the_start(tmp_path, value):
    result = manage("check", tmp_path=tmp_path, **PRODUCTION, PORTAL_URL=value)
    assert result.returncode != 0 and "PORTAL_URL must be the portal's public base URL" in result.stderr


def test_portal_url_is_read_without_its_trailing_slash(tmp_path):
    result = settings_print(
        "settings.PORTAL_URL", tmp_path=tmp_path, DEBUG="true", PORTAL_URL="https://gpu.lab.example:8443/"
    )
    assert result.stdout.split()[-1:] == ["https://gpu.lab.example:8443"], result.stdout + result.stderr


def test_production_without_secret_key_fails_loudly(tmp_path):
    result = manage("check", tmp_path=tmp_path, DEBUG="false", ALLOWED_HOSTS="portal.example.org")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_bad_value_in_environment_fails_loudly(tmp_path):
    result = manage("check", tmp_path=tmp_path, DEBUG="sometimes")
    assert result.returncode != 0
    assert "DEBUG must be a boolean" in result.stderr
    result = manage("check", tmp_path=tmp_path, SECRET_KEY="x" * 50, ATTACHMENT_MAX_BYTES="10MB")
    assert result.returncode != 0
    assert "ATTACHMENT_MAX_BYTES must be an integer" in result.stderr


def test_a_proxy_network_that_is_not_one_stops_the_start(tmp_path):
    result = manage("check", tmp_path=tmp_path, DEBUG="true", TRUST_PROXY_HEADERS="10.0.0.5/32,nginx-host")
    assert result.returncode != 0
    assert "TRUST_PROXY_HEADERS: 'nginx-host' is not true, false, or an address or network" in result.stderr


@pytest.mark.parametrize(
    ("raw", "trusted", "networks"),
    [("", False, []), ("false", False, []), ("TRUE", True, []), ("on", True, []),
     ("10.0.0.5/32, 2001:db8::/64", True, ["10.0.0.5/32", "2001:db8::/64"]), ("10.0.0.5", True, ["10.0.0.5"])],
)  # fmt: skip
def test_trust_proxy_headers_is_off_on_or_the_proxies_networks(raw, trusted, networks, monkeypatch):
    monkeypatch.setenv("X_TRUST", raw)
    assert env_trust_proxy("X_TRUST") == (trusted, networks)


def test_email_url(monkeypatch):
    monkeypatch.delenv("X_MAIL", raising=False)
    assert env_email_url("X_MAIL")["BACKEND"] == "django.core.mail.backends.console.EmailBackend"
    monkeypatch.setenv("X_MAIL", "smtp://gpu%40lab.example:p%3Ass%40@smtp.lab.example")
    assert env_email_url("X_MAIL") == {
        "BACKEND": "django.core.mail.backends.smtp.EmailBackend", "EMAIL_HOST": "smtp.lab.example",
        "EMAIL_PORT": 587, "EMAIL_HOST_USER": "gpu@lab.example", "EMAIL_HOST_PASSWORD": "p:ss@",
        "EMAIL_USE_TLS": True, "EMAIL_USE_SSL": False, "DEFAULT_FROM_EMAIL": "",
    }  # fmt: skip
    monkeypatch.setenv("X_MAIL", "smtps://relay.lab.example?from=gpu-portal@lab.example")
    mail = env_email_url("X_MAIL")
    assert (mail["EMAIL_PORT"], mail["EMAIL_USE_TLS"], mail["EMAIL_USE_SSL"]) == (465, False, True)
    assert mail["DEFAULT_FROM_EMAIL"] == "gpu-portal@lab.example"
    monkeypatch.setenv("X_MAIL", "smtp+insecure://127.0.0.1:2525")
    mail = env_email_url("X_MAIL")
    assert (mail["EMAIL_PORT"], mail["EMAIL_USE_TLS"], mail["EMAIL_USE_SSL"]) == (2525, False, False)
    for raw, problem in [("relay.lab.example", "must be smtp://"), ("smtp://relay:port", "port is not a number"),
                         ("smtp://relay?sender=x", "unknown parameter 'sender'")]:  # fmt: skip
        monkeypatch.setenv("X_MAIL", raw)
        with pytest.raises(ConfigError, match=problem):
            env_email_url("X_MAIL")


def _setting(tmp_path, expression: str, **env) -> str:
    result = settings_print(expression, tmp_path=tmp_path, **env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


def test_the_sender_is_the_relay_account_or_the_portal_host(tmp_path):
    sender = "settings.DEFAULT_FROM_EMAIL"
    portal = {"DEBUG": "true", "PORTAL_URL": "https://gpu.lab.example"}
    assert _setting(tmp_path, sender, **portal) == "gpu-portal@gpu.lab.example"
    assert _setting(tmp_path, sender, **portal, EMAIL_URL="smtp://me%40lab.example:pw@relay") == "me@lab.example"
    assert _setting(tmp_path, sender, **portal, EMAIL_URL="smtp://relay?from=a@lab.example") == "a@lab.example"


def test_plain_http_turns_every_https_protection_off_at_once(tmp_path):
    names = "SECURE_SSL_REDIRECT SESSION_COOKIE_SECURE CSRF_COOKIE_SECURE SECURE_HSTS_SECONDS INGEST_ALLOW_HTTP"
    expression = ", ".join(f"settings.{name}" for name in names.split())
    production = {**PRODUCTION, "PORTAL_URL": "http://gpu.lab.example"}
    assert _setting(tmp_path, expression, **production).split() == ["True", "True", "True", "31536000", "False"]
    plain = _setting(tmp_path, expression, **production, PLAIN_HTTP="true")
    assert plain.split() == ["False", "False", "False", "0", "True"]


def test_slurm_mode_off_cli_or_rest(tmp_path):
    expression = "settings.SLURM_ENABLED, settings.SLURM_MODE"
    assert _setting(tmp_path, expression, DEBUG="true").split() == ["False", "cli"]
    assert _setting(tmp_path, expression, DEBUG="true", SLURM_MODE="rest").split() == ["True", "rest"]
    result = manage("check", tmp_path=tmp_path, DEBUG="true", SLURM_MODE="ssh")
    assert result.returncode != 0 and "SLURM_MODE must be off, cli or rest, not 'ssh'" in result.stderr


def test_webhook_networks_may_name_every_private_one(tmp_path):
    expression = "settings.WEBHOOK_ALLOW_PRIVATE, settings.WEBHOOK_ALLOWED_NETWORKS"
    assert _setting(tmp_path, expression, DEBUG="true") == "False []"
    both = _setting(tmp_path, expression, DEBUG="true", WEBHOOK_ALLOWED_NETWORKS="private,10.1.2.0/24")
    assert both == "True ['10.1.2.0/24']"


def test_csrf_trusts_the_public_address(tmp_path):
    assert _setting(tmp_path, "settings.CSRF_TRUSTED_ORIGINS", DEBUG="true") == "[]"
    trusted = _setting(tmp_path, "settings.CSRF_TRUSTED_ORIGINS", DEBUG="true", PORTAL_URL="https://gpu.lab.example/")
    assert trusted == "['https://gpu.lab.example']"


def test_debug_is_off_unless_asked_for(tmp_path):
    """Production-safe by default: no DEBUG, so no secret key means no start."""
    result = manage("check", tmp_path=tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr
    shell = "settings.DEBUG, settings.TRUST_PROXY_HEADERS"
    result = settings_print(shell, tmp_path=tmp_path, SECRET_KEY="x" * 50)
    assert result.stdout.split()[-2:] == ["False", "False"], result.stdout + result.stderr
    result = settings_print(shell, tmp_path=tmp_path, DEBUG="true", TRUST_PROXY_HEADERS="true")
    assert result.stdout.split()[-2:] == ["True", "True"], result.stdout + result.stderr


def test_sqlite_keeps_its_connections_a_server_database_only_when_asked(tmp_path):
    """Opening an SQLite connection per request cost ingest as much as storing the batch; a
    server's connections stay the operator's to size."""
    shell = "settings.DATABASES['default']['CONN_MAX_AGE']"
    assert settings_print(shell, tmp_path=tmp_path, DEBUG="true").stdout.split()[-1:] == ["600"]
    postgres = "postgres://postgres@127.0.0.1:5432/test"
    result = settings_print(shell, tmp_path=tmp_path, DEBUG="true", DATABASE_URL=postgres)
    assert result.stdout.split()[-1:] == ["0"], result.stdout + result.stderr
    result = settings_print(shell, tmp_path=tmp_path, DEBUG="true", DATABASE_URL=postgres,
                    DATABASE_CONN_MAX_AGE="300")  # fmt: skip
    assert result.stdout.split()[-1:] == ["300"], result.stdout + result.stderr
    result = settings_print(shell, tmp_path=tmp_path, DEBUG="true", DATABASE_CONN_MAX_AGE="0")
    assert result.stdout.split()[-1:] == ["0"], result.stdout + result.stderr
