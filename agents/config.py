"""Configuration: flags > environment (GPU_AGENT_*) > TOML file > defaults.

Every setting has one name, spelled `--spool-dir` as a flag, `GPU_AGENT_SPOOL_DIR` in the
environment and `spool_dir` in the TOML file. A bad value stops the agent with a message
naming where it came from, rather than running with a surprise.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import os
import socket
import tomllib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

ENV_PREFIX = "GPU_AGENT_"
# Where `gpu-fleet-agent enrol` writes, read when it exists and no --config is given.
DEFAULT_CONFIG_FILE = "/etc/gpu-fleet-agent/agent.toml"


class ConfigError(Exception):
    pass


@dataclass
class Config:
    url: str | None = None
    token: str | None = None
    token_file: str | None = None
    interval: float = 10.0
    batch_interval: float | None = None
    max_batch_readings: int = 500
    max_post_readings: int = 5000
    max_post_kb: int = 1008
    spool_dir: str = "/var/lib/gpu-fleet-agent"
    spool_max_mb: float = 256.0
    spool_max_age_hours: float = 167.0
    memory_max_mb: float = 16.0
    timeout: float = 10.0
    ca_file: str | None = None
    insecure_http: bool = False
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    inventory_refresh: float = 300.0
    hostname: str | None = None
    simulate: int = 0
    scenario: str = "healthy"
    speed: float = 1.0
    dcgmi: str = "dcgmi"
    log_level: str = "INFO"
    once: bool = False
    stdout: bool = False
    replay_rejected: bool = False


HELP = {
    "url": "portal base URL, e.g. https://portal.example.com (the agent posts to /api/v1/ingest)",
    "token": "host token (Bearer); prefer --token-file or the environment over a flag, which `ps` shows",
    "token_file": "file holding the host token",
    "interval": "seconds between two collections",
    "batch_interval": "seconds between two batches (default: --interval)",
    "max_batch_readings": "most readings in one batch",
    "max_post_readings": "most readings in one post when a backlog is sent (the protocol allows 5,000)",
    "max_post_kb": "largest post in KiB of JSON when a backlog is sent (the portal takes 1 MiB)",
    "spool_dir": "directory of the durable spool (SQLite)",
    "spool_max_mb": "spool size bound in MiB; past it the oldest batches are dropped",
    "spool_max_age_hours": "batches older than this are dropped (the portal refuses readings over 7 days old)",
    "memory_max_mb": "when the spool cannot be written (full disk), batches are kept in memory up to this bound",
    "timeout": "HTTP timeout in seconds",
    "ca_file": "PEM file of extra CA certificates to trust (TLS verification is always on)",
    "insecure_http": "allow an http:// portal URL that is not loopback: the host token then crosses the network "
    "in clear (a trusted lab LAN only; the portal must also allow it, PLAIN_HTTP)",
    "backoff_initial": "first retry delay in seconds after a failed send",
    "backoff_max": "longest retry delay in seconds",
    "inventory_refresh": "seconds between two inventory reads",
    "hostname": "host name reported to the portal (default: this machine's; sim-<hash> when simulating)",
    "simulate": "simulate N GPUs instead of using NVML",
    "scenario": "comma-separated simulation scenarios, assigned round-robin to the simulated GPUs",
    "speed": "simulation time factor: 600 shows ten minutes of drift per real second",
    "dcgmi": "DCGM's dcgmi for diagnostics the portal asks for: a name looked up on PATH or a path; "
    "'none': never use DCGM (the agent's own NVML checks at level 1, skip at levels 2-3)",
    "log_level": "DEBUG, INFO, WARNING or ERROR",
    "once": "collect one batch, deliver it (or print it with --stdout) and exit",
    "stdout": "print batches as JSON on stdout instead of sending them; no network, no spool",
    "replay_rejected": "put the batches the portal refused (spool table 'rejected') back in the queue and exit; "
    "a running agent sends them",
}
FLAG_ONLY = {"once", "stdout", "replay_rejected"}


def _convert(name: str, raw: Any, kind: Any, source: str) -> Any:
    if raw is None:
        return None
    try:
        if kind is bool or kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"not a boolean: {raw!r}")
        if "int" in str(kind):
            if isinstance(raw, bool):
                raise ValueError("not an integer")
            return int(raw)
        if "float" in str(kind):
            if isinstance(raw, bool):
                raise ValueError("not a number")
            return float(raw)
        return str(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} from {source}: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agents",
        description="GPU Fleet Portal host agent: reads NVML every interval and pushes batches to the portal "
        "(protocol ingest-v1), through a durable spool.",
        epilog=f"Every option can also be set as an environment variable ({ENV_PREFIX}URL, {ENV_PREFIX}TOKEN, "
        f"{ENV_PREFIX}SPOOL_DIR, ...) or in a TOML file (keys like spool_dir). Precedence: flag > "
        "environment > file > default.",
    )
    parser.add_argument(
        "--config", default=None, help=f"TOML file (env {ENV_PREFIX}CONFIG; read if present: {DEFAULT_CONFIG_FILE})"
    )
    defaults = Config()
    for field in fields(Config):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        help_text = HELP[field.name]
        if field.name not in FLAG_ONLY:
            help_text += f" [env {ENV_PREFIX}{field.name.upper()}]"
        if field.type == "bool":
            parser.add_argument(flag, action="store_true", default=None, help=help_text)
        else:
            parser.add_argument(
                flag,
                default=None,
                metavar=field.name.upper(),
                help=help_text + ("" if default is None else f" (default: {default})"),
            )
    return parser


def _config_file(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str | None, dict[str, Any]]:
    """The TOML file in force (--config, GPU_AGENT_CONFIG, else the default if it exists) and its values."""
    path = args.config or environ.get(ENV_PREFIX + "CONFIG")
    if not path and os.path.exists(DEFAULT_CONFIG_FILE):
        path = DEFAULT_CONFIG_FILE
    if not path:
        return None, {}
    try:
        with open(path, "rb") as handle:
            file_values = {key.replace("-", "_"): value for key, value in tomllib.load(handle).items()}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    unknown = set(file_values) - {f.name for f in fields(Config)} - FLAG_ONLY
    if unknown:
        raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(sorted(unknown))}")
    return path, file_values


def token_location(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Where the host token is read from, by the same precedence as load_config: ("config", the TOML
    file) or ("file", the token file); None when it comes from --token or GPU_AGENT_TOKEN, which
    nothing can rewrite."""
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    if args.token is not None or ENV_PREFIX + "TOKEN" in environ:
        return None
    path, file_values = _config_file(args, environ)
    if file_values.get("token") is not None and path:
        return "config", path
    token_file = args.token_file or environ.get(ENV_PREFIX + "TOKEN_FILE") or file_values.get("token_file")
    return ("file", str(token_file)) if token_file else None


def load_config(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    _, file_values = _config_file(args, environ)

    config = Config()
    for field in fields(Config):
        name = field.name
        value = _convert(name, file_values.get(name), field.type, "the config file")
        if name not in FLAG_ONLY and (ENV_PREFIX + name.upper()) in environ:
            value = _convert(name, environ[ENV_PREFIX + name.upper()], field.type, ENV_PREFIX + name.upper())
        flag_value = getattr(args, name)
        if flag_value is not None:
            value = _convert(name, flag_value, field.type, "--" + name.replace("_", "-"))
        if value is not None:
            setattr(config, name, value)
    finish(config)
    return config


def finish(config: Config) -> None:
    """Derive defaults that depend on other settings, and check the whole."""
    if config.token is None and config.token_file:
        try:
            with open(config.token_file, encoding="utf-8") as handle:
                config.token = handle.read().strip()
        except OSError as exc:
            raise ConfigError(f"token file: {exc}") from exc
    if config.batch_interval is None:
        config.batch_interval = config.interval
    if config.hostname is None:
        config.hostname = default_hostname(simulated=config.simulate > 0)
    for name in (
        "interval",
        "batch_interval",
        "timeout",
        "speed",
        "spool_max_mb",
        "spool_max_age_hours",
        "memory_max_mb",
        "backoff_initial",
        "backoff_max",
    ):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} must be positive")
    if config.simulate < 0 or config.max_batch_readings < 1:
        raise ConfigError("simulate must be >= 0 and max_batch_readings >= 1")
    if not 1 <= config.max_post_readings <= 5000 or not 64 <= config.max_post_kb <= 1024:
        raise ConfigError("max_post_readings must be 1-5000 and max_post_kb 64-1024 (the protocol's limits)")
    if not config.stdout and not config.replay_rejected:
        if not config.url:
            raise ConfigError(f"no portal URL: give --url or {ENV_PREFIX}URL (or --stdout to print instead)")
        if not config.token:
            raise ConfigError(f"no host token: give {ENV_PREFIX}TOKEN, --token-file or --token")
        check_url(config.url, insecure_http=config.insecure_http)
    if config.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"log_level: unknown level {config.log_level!r}")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, *, insecure_http: bool = False) -> None:
    """An http:// portal is refused unless it is this machine: the token would travel in clear."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"url must start with http:// or https://, not {url!r}")
    host = urllib.parse.urlsplit(url).hostname or ""
    if url.startswith("http://") and not insecure_http and not is_loopback(host):
        raise ConfigError(
            f"refusing the plain-HTTP portal {url!r}: the host token would cross the network in clear. "
            "Use https://, or on a trusted LAN pass --insecure-http "
            f"({ENV_PREFIX}INSECURE_HTTP=true, insecure_http = true in the TOML file)"
        )


def default_hostname(*, simulated: bool) -> str:
    name = socket.gethostname()
    if not simulated:
        return name
    # Stable across restarts on the same machine, and never the name of a real host.
    return "sim-" + hashlib.sha256(name.encode()).hexdigest()[:8]
