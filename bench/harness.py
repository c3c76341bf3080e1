"""What the benchmarks share: Django in the bench's own process over a scratch database, and the
portal served in a subprocess (`manage.py serve`) for the benches that talk to it over HTTP.

A bench script puts the repository on sys.path and imports this as `bench.harness`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from portal.core.supervise import ChildFailed, free_port, serving

REPO = Path(__file__).resolve().parents[1]


def django_setup(**env_defaults: str) -> tempfile.TemporaryDirectory | None:
    """Set Django up in this process and migrate the database: DATABASE_URL when it is set,
    else a throwaway SQLite database (VAR_DIR too) in the temporary folder returned, which goes
    when the object does (keep it for the bench's run). `env_defaults` are settings taken
    unless the environment sets them (DEBUG stays off unless they say otherwise, as in production;
    a random SECRET_KEY)."""
    tmp = None
    if not os.environ.get("DATABASE_URL"):
        tmp = tempfile.TemporaryDirectory()
        os.environ["DATABASE_URL"] = f"sqlite:///{tmp.name}/bench.sqlite3"
        os.environ["VAR_DIR"] = tmp.name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(16))  # DEBUG off wants one
    for name, value in env_defaults.items():
        os.environ.setdefault(name, value)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return tmp


@contextlib.contextmanager
def portal_served(env: dict[str, str], *, log: Path, workers: int = 1, timeout_s: float = 60) -> Iterator[int]:
    """`manage.py serve` with env on a free loopback port until the block ends; yields the port
    once /healthz answers. A portal that exits or does not answer ends the bench with the tail of
    its log."""
    port = free_port()
    command = [sys.executable, str(REPO / "manage.py"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", str(workers)]
    try:
        with serving(
            "the portal", command, url=f"http://127.0.0.1:{port}/healthz", env=env, log=log, cwd=REPO,
            timeout_s=timeout_s, stop_timeout_s=20,
        ):  # fmt: skip
            yield port
    except ChildFailed as error:
        raise SystemExit(f"{error}\n{log.read_text()[-3000:]}") from None
