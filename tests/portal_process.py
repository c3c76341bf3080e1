"""The real portal in a subprocess: Daphne on a free port over a throwaway SQLite database.

For tests that must see the portal as a client does (the browser tests, ingest with its
back-end services down)."""

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from portal.ops.supervise import ChildFailed, free_port, serving

REPO = Path(__file__).resolve().parents[1]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@dataclasses.dataclass
class PortalProcess:
    base_url: str
    env: dict[str, str]
    var_dir: Path
    log: Path

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run another manage.py command against the server's database."""
        return manage(self.env, *args, check=check)


def manage(env, *args, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )
    if check and result.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


@functools.cache
def _code_key() -> str:
    """A digest of everything a migrated database depends on: the portal's code (its migrations,
    and the post_migrate handlers' roles and permissions) and the installed Django."""
    import django

    digest = hashlib.sha256(f"{django.__version__} {sys.executable}".encode())
    for path in sorted((REPO / "portal").rglob("*.py")):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def sqlite_migrated_once(migrate_into, *, kind: str) -> Path:
    """An SQLite database as `migrate_into(path)` leaves it, made once for the code as it stands
    and shared by every test process (a file lock keeps two from making it at once)."""
    folder = Path(tempfile.gettempdir())
    database = folder / f"gpu-fleet-tests-migrated-{kind}-{_code_key()}.sqlite3"
    with open(folder / "gpu-fleet-tests-migrated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not database.exists():
            making = database.with_suffix(f".{os.getpid()}.tmp")
            making.unlink(missing_ok=True)
            migrate_into(making)
            os.replace(making, database)
    return database


def migrate(env) -> None:
    """The database of `env` migrated, as `manage.py migrate` leaves it. An SQLite one is a copy
    of one migrated once for the whole run: migrating costs a process 5 CPU-seconds, and the
    tests of portals in subprocesses ask for the same database a dozen times."""
    url = env.get("DATABASE_URL", "")
    if not url.startswith("sqlite:////"):
        manage(env, "migrate", "--noinput", "-v", "0")
        return

    def migrate_into(path):
        manage({**env, "DATABASE_URL": f"sqlite:///{path}"}, "migrate", "--noinput", "-v", "0")

    shutil.copyfile(sqlite_migrated_once(migrate_into, kind="portal"), url.removeprefix("sqlite:///"))


def ingest_post(base_url: str, token: str, batch: dict, *, timeout: float = 30) -> tuple[int, dict]:
    """POST a batch to a running portal's ingest endpoint as an agent does: (status, answer)."""
    request = urllib.request.Request(
        base_url + "/api/v1/ingest",
        data=json.dumps(batch).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read())


def portal_env(var_dir: Path, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(
        VAR_DIR=str(var_dir),
        DATABASE_URL=f"sqlite:///{var_dir}/e2e.sqlite3",  # always SQLite, whatever the suite runs on
        # Daphne alone, no worker: tasks run where they are sent, once per batch, right away.
        DJANGO_SETTINGS_MODULE="tests.settings_portal",
        DEBUG="true",
        PYTHONUNBUFFERED="1",
        # No burn-in diagnostic for the GPUs the tests' agents register (as tests/settings.py);
        # a test that wants one passes BURN_IN_LEVEL.
        BURN_IN_LEVEL="0",
    )
    env.update(overrides)
    return env


@contextlib.contextmanager
def running_portal(env: dict[str, str], var_dir: Path):
    """Serve the (already migrated) database in env with Daphne until the block ends."""
    port = free_port()
    log = var_dir / "daphne.log"
    base_url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"]
    try:
        with serving("the portal", command, url=base_url + "/healthz", env=env, log=log, cwd=REPO, timeout_s=30):
            yield PortalProcess(base_url=base_url, env=env, var_dir=var_dir, log=log)
    except ChildFailed as error:  # it did not come up
        raise AssertionError(f"{error}:\n{log.read_text()[-4000:]}") from None
