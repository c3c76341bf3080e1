#!/usr/bin/env bash
# Restore a backup made by deploy/backup.sh into an EMPTY database and an empty MEDIA_ROOT, then
# bring the schema up to this code's migrations. Stop the web nodes, workers and beat first.
#   set -a; . /etc/gpu-fleet/portal.env; set +a; deploy/restore.sh /srv/backups/gpu-fleet/20261204T010000Z
set -euo pipefail
# Restored attachments: the portal's user and group only (the units' UMask=0027).
umask 027
folder="${1:?usage: restore.sh BACKUP_FOLDER}"
: "${DATABASE_URL:?DATABASE_URL must be set (the database to restore into)}"
: "${MEDIA_ROOT:?MEDIA_ROOT must be set}"
[ -f "$folder/database.dump" ] && [ -f "$folder/media.tar.gz" ] || { echo "restore.sh: $folder is not a complete backup" >&2; exit 2; }
here="$(cd "$(dirname "$0")/.." && pwd)"

# The password goes to psql and pg_restore in a pgpass file only this user can read, never on
# their command lines (which every user of the machine sees in `ps`).
secrets="$(mktemp -d)"
trap 'rm -rf "$secrets"' EXIT
database="$("${PYTHON:-python3}" "$here/deploy/pg_url.py" "$secrets/pgpass")"
if [ -f "$secrets/pgpass" ]; then export PGPASSFILE="$secrets/pgpass"; fi

tables="$(psql --dbname="$database" -Atc "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")"
if [ "$tables" != "0" ]; then
  echo "restore.sh: the target database already has $tables tables; restore into an empty one" >&2
  exit 2
fi
pg_restore --no-owner --no-privileges --exit-on-error --dbname="$database" "$folder/database.dump"
mkdir -p "$MEDIA_ROOT"
# The umask above, not the modes in the archive (which root would otherwise keep).
tar -C "$MEDIA_ROOT" --no-same-permissions -xzf "$folder/media.tar.gz"
"${PYTHON:-$here/.venv/bin/python}" "$here/manage.py" migrate --noinput
echo "restored $folder"
