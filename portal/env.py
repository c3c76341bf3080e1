"""Typed readers for environment variables that fail loudly on a bad value."""

import ipaddress
import os
from urllib.parse import parse_qs, unquote, urlsplit


class ConfigError(ValueError):
    pass


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be a boolean (true/false), got {raw!r}")


def envint(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None


def envfloat(name: str, default: float) -> float:
    """A number, decimals allowed (a rate of 0.5 per second); not NaN or infinite."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{name} must be a finite number, got {raw!r}")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_trust_proxy(name: str) -> tuple[bool, list[str]]:
    """`false`, `true` (any peer) or comma-separated addresses/networks of the proxies:
    (trusted at all, the networks it is trusted from; empty: any)."""
    raw = os.environ.get(name, "").strip()
    if raw.lower() in _FALSE or not raw:
        return False, []
    if raw.lower() in _TRUE:
        return True, []
    networks = [item.strip() for item in raw.split(",") if item.strip()]
    return True, env_networks_check(name, networks, alternatives="true, false, or ")


def env_networks_check(name: str, networks: list[str], *, alternatives: str = "") -> list[str]:
    """`networks` when each is an address or network (CIDR); else a ConfigError naming the variable,
    the item, and what else it could have said (`alternatives`, e.g. "true, false, or ")."""
    for item in networks:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(
                f"{name}: {item!r} is not {alternatives}an address or network (e.g. 10.0.0.5/32)"
            ) from None
    return networks


# scheme: (STARTTLS, TLS from the first byte, default port)
_EMAIL_SCHEMES = {"smtp": (True, False, 587), "smtps": (False, True, 465), "smtp+insecure": (False, False, 25)}


def env_email_url(name: str) -> dict:
    """Django's EMAIL_* settings from one URL, `smtp://user:password@host:port?from=address`
    (user and password percent-encoded); unset: the console backend, nothing sent."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {"BACKEND": "django.core.mail.backends.console.EmailBackend", "EMAIL_HOST_USER": "",
                "DEFAULT_FROM_EMAIL": ""}  # fmt: skip
    url = urlsplit(raw)
    if url.scheme not in _EMAIL_SCHEMES or not url.hostname:
        raise ConfigError(
            f"{name} must be smtp://, smtps:// or smtp+insecure:// with a host, e.g. smtp://relay.lab.example"
        )
    starttls, tls, default_port = _EMAIL_SCHEMES[url.scheme]
    try:
        port = url.port or default_port
    except ValueError:
        raise ConfigError(f"{name}: the port is not a number") from None
    query = parse_qs(url.query)
    unknown = set(query) - {"from"}
    if unknown:
        raise ConfigError(f"{name}: unknown parameter {sorted(unknown)[0]!r} (only `from`)")
    return {
        "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": url.hostname,
        "EMAIL_PORT": port,
        "EMAIL_HOST_USER": unquote(url.username or ""),
        "EMAIL_HOST_PASSWORD": unquote(url.password or ""),
        "EMAIL_USE_TLS": starttls,
        "EMAIL_USE_SSL": tls,
        "DEFAULT_FROM_EMAIL": query.get("from", [""])[-1],
    }
