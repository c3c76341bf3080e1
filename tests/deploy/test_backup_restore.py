"""deploy/backup.sh and deploy/restore.sh, as docs/production.md tells an admin to run them: a
backup of a running portal's PostgreSQL database and MEDIA_ROOT, restored into a fresh database
and an empty folder, holds every record, attachment, ticket and checklist run."""

import importlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.apps import apps as django_apps
from django.core.files.base import ContentFile
from django.db import connection
from django.utils import timezone

from portal.checklists.models import ChecklistRun
from portal.checklists.services import run_start
from portal.fleet.models import Attachment, MaintenanceRecord
from portal.maintenance.models import Ticket
from tests.factories import GpuFactory, HostFactory, RecordFactory

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def url_for(name: str) -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    return f"postgres://{user}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{name}"


def scripts_env(database: str, media: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(DATABASE_URL=url_for(database), MEDIA_ROOT=str(media), PYTHON=sys.executable, DEBUG="true",
               DJANGO_SETTINGS_MODULE="portal.settings")  # fmt: skip
    return env


def restore(folder: Path, env: dict) -> subprocess.CompletedProcess:
    command = ["bash", str(REPO / "deploy" / "restore.sh"), str(folder)]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_a_backup_restores_every_record_ticket_run_and_file(require_postgres, tmp_path, media_root, admin):
    host = HostFactory(hostname="dgx-backup")
    gpu = GpuFactory(host=host, index=0)
    records = [RecordFactory(host=host, gpu=gpu, notes=f"record {n}") for n in range(3)]
    attachment = Attachment(record=records[0], original_name="heatsink.jpg", content_type="image/jpeg", size_bytes=5,
                            uploaded_by=admin)  # fmt: skip
    attachment.file.save("heatsink.jpg", ContentFile(b"\xff\xd8xyz"), save=True)
    now = timezone.now()
    Ticket.objects.create(fingerprint="backup/1", rule="overheat", host=host, gpu=gpu, title="Overheating",
                          first_seen=now, last_seen=now)  # fmt: skip
    # A transactional test runs after others have flushed the tables: ship the templates again.
    importlib.import_module("portal.checklists.migrations.0002_shipped_templates").ship(django_apps, None)
    run = run_start(template_key="cleaning", hostname=host.hostname, gpu_uuids=[], user=admin)
    expected = {
        "records": sorted(MaintenanceRecord.objects.values_list("id", "notes")),
        "tickets": sorted(Ticket.objects.values_list("id", "title")),
        "runs": sorted(ChecklistRun.objects.values_list("id", "state")),
    }
    assert len(expected["runs"]) == 1 and run is not None

    source = connection.settings_dict["NAME"]
    backups = tmp_path / "backups"
    made = subprocess.run(["bash", str(REPO / "deploy" / "backup.sh"), str(backups)],
                          env=scripts_env(source, media_root), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert made.returncode == 0, made.stderr
    folder = Path(made.stdout.strip().splitlines()[-1])
    assert (folder / "database.dump").stat().st_size > 0 and not list(backups.glob(".*partial"))

    fresh = f"restore_{uuid.uuid4().hex[:8]}"
    admin_url = url_for("postgres")
    with psycopg.connect(admin_url, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{fresh}"')
    restored_media = tmp_path / "restored-media"
    try:
        done = restore(folder, scripts_env(fresh, restored_media))
        assert done.returncode == 0, done.stderr[-3000:]
        with psycopg.connect(url_for(fresh)) as db:
            found = {
                "records": sorted(db.execute("SELECT id, notes FROM fleet_maintenancerecord").fetchall()),
                "tickets": sorted(db.execute("SELECT id, title FROM maintenance_ticket").fetchall()),
                "runs": sorted(db.execute("SELECT id, state FROM checklists_checklistrun").fetchall()),
            }
        assert found == {key: [tuple(row) for row in rows] for key, rows in expected.items()}
        assert (restored_media / attachment.file.name).read_bytes() == b"\xff\xd8xyz"
        again = restore(folder, scripts_env(fresh, restored_media))
        assert again.returncode == 2 and "restore into an empty one" in again.stderr
    finally:
        with psycopg.connect(admin_url, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')


PASSWORD = "S3cret:pw\\x"  # a colon and a backslash: pgpass escapes both
SPY = """#!/bin/sh
# Records how the script called {name}, then runs the real one.
{{
  printf 'argv: %s\n' "$*"
  if [ -n "$PGPASSFILE" ]; then
    printf 'passfile: %s %s %s\n' "$PGPASSFILE" "$(stat -c %a "$PGPASSFILE")" "$(cat "$PGPASSFILE")"
  fi
}} >> {log}
exec {real} "$@"
"""


def spied_path(tmp_path: Path, log: Path) -> str:
    """PATH with pg_dump, psql and pg_restore replaced by spies that log their calls."""
    spies = tmp_path / "spies"
    spies.mkdir(exist_ok=True)
    for name in ("pg_dump", "psql", "pg_restore"):
        real = subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True, text=True).stdout.strip()
        assert real, f"{name} missing"
        (spies / name).write_text(SPY.format(name=name, log=log, real=real))
        (spies / name).chmod(0o755)
    return f"{spies}:{os.environ['PATH']}"


def with_password(url: str) -> str:
    """The URL with a password (percent-encoded as in DATABASE_URL): the test server trusts local
    connections, so it is never checked, only carried."""
    quoted = PASSWORD.replace("%", "%25").replace(":", "%3A").replace("\\", "%5C")
    return url.replace("://postgres@", f"://postgres:{quoted}@", 1)


def test_backups_are_private_and_the_password_never_on_a_command_line(require_postgres, tmp_path, media_root):
    """Dumps hold sessions, robot secrets and webhook URLs: 0700 folders, 0600 files whatever the
    caller's umask; pg_dump, psql and pg_restore get the password from a 0600 pgpass file removed
    afterwards, never as an argument that `ps` shows every user."""
    (media_root / "photos").mkdir(parents=True)
    (media_root / "photos" / "rma.pdf").write_bytes(b"%PDF-1.4 rma")
    log = tmp_path / "calls.log"
    backups = tmp_path / "backups"

    env = scripts_env(connection.settings_dict["NAME"], media_root)
    env.update(DATABASE_URL=with_password(env["DATABASE_URL"]), PATH=spied_path(tmp_path, log))
    made = subprocess.run(["bash", str(REPO / "deploy" / "backup.sh"), str(backups)], env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=lambda: os.umask(0o022))  # fmt: skip
    assert made.returncode == 0, made.stderr
    folder = Path(made.stdout.strip().splitlines()[-1])
    assert oct(backups.stat().st_mode & 0o777) == "0o700" and oct(folder.stat().st_mode & 0o777) == "0o700"
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in folder.iterdir()} == {
        "database.dump": "0o600", "media.tar.gz": "0o600"}  # fmt: skip

    fresh = f"restore_{uuid.uuid4().hex[:8]}"
    admin_url = url_for("postgres")
    with psycopg.connect(admin_url, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{fresh}"')
    restored_media = tmp_path / "restored-media"
    try:
        env = scripts_env(fresh, restored_media)
        env.update(DATABASE_URL=with_password(env["DATABASE_URL"]), PATH=spied_path(tmp_path, log))
        command = ["bash", str(REPO / "deploy" / "restore.sh"), str(folder)]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                              preexec_fn=lambda: os.umask(0o022))  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        with psycopg.connect(admin_url, autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')
    assert (restored_media / "photos" / "rma.pdf").stat().st_mode & 0o007 == 0, "restored files: not world-readable"

    calls = log.read_text().splitlines()
    argv = [line for line in calls if line.startswith("argv: ")]
    assert len(argv) >= 3, calls  # pg_dump, psql, pg_restore
    assert not [line for line in argv if "S3cret" in line], argv
    passfiles = [line.split(" ", 3)[1:] for line in calls if line.startswith("passfile: ")]
    assert len(passfiles) == len(argv)
    assert {(mode, content) for _path, mode, content in passfiles} == {("600", "*:*:*:*:S3cret\\:pw\\\\x")}
    assert not any(Path(path).exists() for path, _mode, _content in passfiles), "removed when the script ends"
