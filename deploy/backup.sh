#!/usr/bin/env bash
# Back up a GPU Fleet Portal: the PostgreSQL database (pg_dump, custom format) and MEDIA_ROOT
# (attachments, checklist photos) into one dated folder. Run it on any node with the portal's
# environment (e.g. from a systemd timer as the gpu-fleet user):
#   set -a; . /etc/gpu-fleet/portal.env; set +a; deploy/backup.sh /srv/backups/gpu-fleet
# Telemetry older than the retention is gone anyway; everything else (records, tickets,
# checklist runs, the audit trail, tokens) is in the dump.
set -euo pipefail
# The dump holds sessions, robot secrets and webhook URLs: every folder and file made here is
# this user's alone (0700, 0600).
umask 077
target="${1:?usage: backup.sh BACKUP_DIR}"
: "${DATABASE_URL:?DATABASE_URL must be set (the portal's environment)}"
: "${MEDIA_ROOT:?MEDIA_ROOT must be set (the portal's environment)}"
case "$DATABASE_URL" in postgres://*|postgresql://*) ;; *) echo "backup.sh: DATABASE_URL is not PostgreSQL" >&2; exit 2;; esac

# The password goes to pg_dump in a pgpass file only this user can read, never on its command line
# (which every user of the machine sees in `ps`).
secrets="$(mktemp -d)"
trap 'rm -rf "$secrets"' EXIT
here="$(cd "$(dirname "$0")" && pwd)"
database="$("${PYTHON:-python3}" "$here/pg_url.py" "$secrets/pgpass")"
if [ -f "$secrets/pgpass" ]; then export PGPASSFILE="$secrets/pgpass"; fi

stamp="$(date -u +%Y%m%dT%H%M%SZ)"
folder="$target/$stamp"
partial="$target/.$stamp.partial"
mkdir -p "$partial"
pg_dump --format=custom --no-owner --no-privileges --file="$partial/database.dump" --dbname="$database"
if [ -d "$MEDIA_ROOT" ]; then
  tar -C "$MEDIA_ROOT" -czf "$partial/media.tar.gz" .
else
  tar -czf "$partial/media.tar.gz" --files-from /dev/null
fi
# Renamed into place only when whole: a folder without '.partial' is a complete backup.
mv "$partial" "$folder"
echo "$folder"
