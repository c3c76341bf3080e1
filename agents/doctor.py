"""`gpu-fleet-agent doctor`: one line per check, exit 1 when any fails.

Checks NVML (GPUs, driver and NVML versions), the portal's /healthz (over TLS with a valid
certificate), the token (a dry-run ingest call the portal answers without storing anything),
the clock against the portal's, and that the spool directory is writable.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from agents.config import Config, ConfigError, is_loopback, load_config
from agents.push import ingest_url, portal_opener

# The portal refuses readings more than 5 min in the future; a clock off by more fails there.
CLOCK_TOLERANCE_S = 300.0


class Check:
    def __init__(self) -> None:
        self.failed = 0

    def line(self, ok: bool, name: str, text: str) -> None:
        self.failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {text}")


def _open(config: Config, request: urllib.request.Request | str):
    # The daemon's own opener: no redirect is followed, so the token never goes anywhere but the
    # configured URL (a redirect shows as its 3xx, which is what a wrong URL needs to say).
    return portal_opener(config.url, config.ca_file).open(request, timeout=config.timeout)


def check_nvml(check: Check, config: Config) -> None:
    from agents.daemon import open_device

    try:
        device = open_device(config)
    except Exception as exc:  # noqa: BLE001 - whatever NVML raises is the answer to this check
        check.line(False, "nvml", f"cannot load NVML: {exc}")
        return
    try:
        info = device.system_info()
        count = len(device.gpu_indices())
        what = "simulated " if config.simulate else ""
        check.line(
            count > 0, "nvml",
            f"{count} {what}GPU(s), driver {info.get('driver_version')}, NVML {info.get('nvml_version')}",
        )  # fmt: skip
    finally:
        device.close()


def check_portal(check: Check, config: Config) -> None:
    base = config.url.rstrip("/")
    host = urllib.parse.urlsplit(base).hostname or ""
    if base.startswith("http://"):
        how = "loopback" if is_loopback(host) else "--insecure-http"
        tls_ok = is_loopback(host) or config.insecure_http
        note = f"plain HTTP ({how}), no TLS"
    else:
        tls_ok, note = True, "TLS certificate valid"
    try:
        with _open(config, base + "/healthz") as answer:
            status = answer.status
    except ssl.SSLError as exc:
        check.line(False, "portal", f"{base}/healthz: TLS certificate not valid ({exc}); --ca-file adds a private CA")
        return
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        check.line(False, "portal", f"{base}/healthz: no answer ({exc})")
        return
    check.line(tls_ok and status == 200, "portal", f"{base}/healthz answered {status}; {note}")


def check_token_and_clock(check: Check, config: Config) -> None:
    request = urllib.request.Request(
        ingest_url(config.url), data=b"{}", method="POST",
        headers={"Authorization": f"Bearer {config.token}", "Content-Type": "application/json", "X-Dry-Run": "1"},
    )  # fmt: skip
    sent = time.time()
    try:
        with _open(config, request) as answer:
            body = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode(errors="replace")
        if 300 <= exc.code < 400:
            detail = f"redirected to {exc.headers.get('Location')!r}, not followed: give the portal's own URL"
        check.line(False, "token", f"refused with HTTP {exc.code}: {detail}")
        check.line(False, "clock", "not checked: the token check failed")
        return
    except (OSError, ValueError) as exc:
        check.line(False, "token", f"no answer from {ingest_url(config.url)} ({exc})")
        check.line(False, "clock", "not checked: the portal did not answer")
        return
    if not isinstance(body, dict) or body.get("dry_run") is not True:
        check.line(False, "token", "the portal stored nothing but did not confirm a dry run (a portal too old?)")
        return
    check.line(True, "token", f"accepted for host {body.get('hostname')}")
    try:
        portal_time = dt.datetime.fromisoformat(str(body["time"]).replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError):
        check.line(False, "clock", "the portal's answer carries no time")
        return
    skew = (sent + time.time()) / 2 - portal_time
    limit = f"at most ±{CLOCK_TOLERANCE_S:.0f} s"
    check.line(abs(skew) <= CLOCK_TOLERANCE_S, "clock", f"{skew:+.1f} s from the portal's ({limit})")


def check_spool(check: Check, config: Config) -> None:
    try:
        os.makedirs(config.spool_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=config.spool_dir, prefix=".doctor-") as handle:
            handle.write(b"x")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        check.line(False, "spool", f"{config.spool_dir} is not writable: {exc}")
        return
    check.line(True, "spool", f"{config.spool_dir} is writable")


def check_diagnostics(check: Check, config: Config) -> None:
    """Which tool runs the diagnostics the portal asks for; a dcgmi named but absent is a fault."""
    from agents.daemon import find_dcgmi

    setting = config.dcgmi
    if not setting or setting.lower() == "none":
        check.line(True, "diagnostics", "DCGM off (--dcgmi none): NVML checks at level 1, levels 2-3 skipped")
        return
    found = find_dcgmi(setting)
    if found:
        check.line(True, "diagnostics", f"DCGM's {found}: levels 1-3")
    elif setting == Config.dcgmi:
        check.line(True, "diagnostics", "no DCGM (dcgmi not on PATH): NVML checks at level 1, levels 2-3 skipped")
    else:
        check.line(False, "diagnostics", f"--dcgmi {setting!r} is not an executable here")


def main(argv: list[str] | None = None) -> int:
    """Takes the daemon's options (--config, --url, --token, --spool-dir, --simulate, ...)."""
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"FAIL config: {exc}")
        return 1
    check = Check()
    check_nvml(check, config)
    check_portal(check, config)
    check_token_and_clock(check, config)
    check_spool(check, config)
    check_diagnostics(check, config)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
