#!/bin/sh
# gpu-fleet-agent installer, served by the portal at /agent/install.sh. The portal's "Add hosts"
# page gives the line that runs it:
#   curl -fsSL https://PORTAL/agent/install.sh | sudo sh -s -- --url https://PORTAL --code CODE \
#     --sha256 gpu_fleet_agent-V-py3-none-any.whl=HEX --sha256 nvidia_ml_py-V-py3-none-any.whl=HEX
# Steps: a venv under /opt/gpu-fleet-agent, the agent from the portal's /agent/ (no internet
# needed; pip --require-hashes with the sha256 of each wheel the line names), enrol (the code becomes a host token in /etc/gpu-fleet-agent/agent.toml, mode 0600),
# the systemd unit with its system user and state directory, start. It stops at the first
# failing step, names it, and leaves nothing half-installed running.
set -u

URL="" CODE="" HOSTNAME_ARG="" ROOT="" INSECURE="" CA_FILE="" PYTHON="${PYTHON:-python3}" HASHES=""
usage() { echo "usage: install.sh --url PORTAL_URL --code CODE --sha256 WHEEL=HEX... [--hostname NAME] [--root DIR] [--insecure-http] [--ca-file PEM] [--python PYTHON]" >&2; exit 2; }
# --sha256 WHEEL=HEX: a wheel of the portal's /agent/ and its sha256 (the install line has one per wheel).
add_hash() {
  case "$1" in
    *[!A-Za-z0-9_.=+-]*|*=*=*|=*) echo "--sha256 wants WHEEL=HEX, got: $1" >&2; exit 2 ;;
    *-*-*.whl=*) ;;
    *) echo "--sha256 wants WHEEL=HEX, got: $1" >&2; exit 2 ;;
  esac
  hex="${1#*=}"
  case "$hex" in
    *[!0-9a-f]*) echo "--sha256 $1: not a sha256 (64 hex digits)" >&2; exit 2 ;;
  esac
  [ ${#hex} -eq 64 ] || { echo "--sha256 $1: not a sha256 (64 hex digits)" >&2; exit 2; }
  HASHES="$HASHES $1"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --url) URL="${2:-}"; shift 2 || usage ;;
    --code) CODE="${2:-}"; shift 2 || usage ;;
    --hostname) HOSTNAME_ARG="${2:-}"; shift 2 || usage ;;
    --root) ROOT="${2:-}"; shift 2 || usage ;;
    --insecure-http) INSECURE="--insecure-http"; shift ;;
    --ca-file) CA_FILE="${2:-}"; shift 2 || usage ;;
    --python) PYTHON="${2:-}"; shift 2 || usage ;;
    --sha256) add_hash "${2:-}"; shift 2 || usage ;;
    *) usage ;;
  esac
done
[ -n "$URL" ] && [ -n "$CODE" ] || usage
[ -n "$HASHES" ] || { echo "no --sha256: copy the whole install line again from the portal's Add hosts page" >&2; exit 2; }
URL="${URL%/}"
ROOT="${ROOT%/}"
PREFIX="/opt/gpu-fleet-agent"
CONFIG_DIR="/etc/gpu-fleet-agent"
VENV="$ROOT$PREFIX"
STEP=""
CREATED_VENV=""
SERVICE_TOUCHED=""

cleanup() {
  status=$?
  [ $status -eq 0 ] && return
  echo "gpu-fleet-agent install FAILED at step: $STEP" >&2
  if [ -n "$SERVICE_TOUCHED" ]; then
    systemctl disable --now gpu-fleet-agent >/dev/null 2>&1
    rm -f "$ROOT/etc/systemd/system/gpu-fleet-agent.service"
    echo "  the service was stopped and removed; the enrolment is kept in $ROOT$CONFIG_DIR/agent.toml:" >&2
    echo "  fix the cause, then: $PREFIX/bin/gpu-fleet-agent install-service" >&2
  elif [ -n "$CREATED_VENV" ]; then
    rm -rf "$VENV"
    echo "  removed $VENV; nothing else was changed" >&2
  fi
  exit $status
}
trap cleanup EXIT

step() { STEP="$1"; echo "==> $1"; }

step "check: root and Python 3.11+"
if [ -z "$ROOT" ] && [ "$(id -u)" != 0 ]; then echo "run as root (sudo)" >&2; exit 1; fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "$PYTHON is missing or older than 3.11" >&2; exit 1; }

step "venv: $VENV"
if [ ! -x "$VENV/bin/python" ]; then
  CREATED_VENV=1
  "$PYTHON" -m venv "$VENV" || exit 1
fi

step "package: gpu-fleet-agent from $URL/agent/, each wheel checked against its sha256"
# One requirement per wheel the install line names, pinned to its version and hash: pip refuses
# any file whose sha256 differs, and anything the line does not name.
REQUIREMENTS="$(mktemp)" || exit 1
for pair in $HASHES; do
  wheel="${pair%%=*}"
  rest="${wheel#*-}"
  echo "${wheel%%-*}==${rest%%-*} --hash=sha256:${pair#*=}" >> "$REQUIREMENTS"
done
set -- install -q --disable-pip-version-check --no-index --find-links "$URL/agent/" --upgrade --require-hashes -r "$REQUIREMENTS"
[ -n "$CA_FILE" ] && set -- "$@" --cert "$CA_FILE"
"$VENV/bin/pip" "$@"
PIP_STATUS=$?
rm -f "$REQUIREMENTS"
[ $PIP_STATUS -eq 0 ] || exit 1

step "enrol with the portal"
set -- enrol "$URL" "$CODE" --config-dir "$ROOT$CONFIG_DIR"
[ -n "$HOSTNAME_ARG" ] && set -- "$@" --hostname "$HOSTNAME_ARG"
[ -n "$INSECURE" ] && set -- "$@" --insecure-http
[ -n "$CA_FILE" ] && set -- "$@" --ca-file "$CA_FILE"
"$VENV/bin/gpu-fleet-agent" "$@" || exit 1
CREATED_VENV=""  # enrolled: the token is spent, keep what is installed

step "service: user, state directory, systemd unit, start"
SERVICE_TOUCHED=1
set -- install-service --config-dir "$CONFIG_DIR" --executable "$PREFIX/bin/gpu-fleet-agent"
[ -n "$ROOT" ] && set -- "$@" --root "$ROOT"
"$VENV/bin/gpu-fleet-agent" "$@" || exit 1

step "start: the service runs"
systemctl is-active --quiet gpu-fleet-agent || { echo "gpu-fleet-agent is not running: journalctl -u gpu-fleet-agent" >&2; exit 1; }
SERVICE_TOUCHED=""
echo "gpu-fleet-agent is installed and running; check it with: $PREFIX/bin/gpu-fleet-agent doctor --config $CONFIG_DIR/agent.toml"
