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
