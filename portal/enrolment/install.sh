#!/bin/sh
# gpu-fleet-agent installer, served by the portal at /agent/install.sh. The portal's "Add hosts"
# page gives the line that runs it, the code in the environment (never on a command line, which
# every user of a shared GPU node can read in /proc/*/cmdline):
#   curl -fsSL https://PORTAL/agent/install.sh | GPU_FLEET_ENROL_CODE=CODE sudo --preserve-env=GPU_FLEET_ENROL_CODE sh -s -- --url https://PORTAL \
#     --sha256 gpu_fleet_agent-V-py3-none-any.whl=HEX --sha256 nvidia_ml_py-V-py3-none-any.whl=HEX
# Steps: redeem the code first, before anything is downloaded (curl reads the request from stdin;
# the answer, the host token, goes to /etc/gpu-fleet-agent/enrolment.json, mode 0600); a venv
# under /opt/gpu-fleet-agent and the agent from the portal's /agent/ (no internet needed; pip
# --require-hashes with the sha256 of each wheel the line names); the
# agent stores the token from that file in /etc/gpu-fleet-agent/agent.toml (0600, read on stdin);
# the systemd unit with its system user and state directory; start. It stops at the first failing
# step, names it, and leaves nothing half-installed running. A host whose code was redeemed keeps
# its token in enrolment.json until the agent has stored it, so running install.sh again (without
# a code) finishes the job.
set -u

URL="" CODE="${GPU_FLEET_ENROL_CODE:-}" HOSTNAME_ARG="" ROOT="" INSECURE="" CA_FILE="" PYTHON="${PYTHON:-python3}" HASHES=""
unset GPU_FLEET_ENROL_CODE  # no child needs it: the code goes to curl on stdin
usage() { echo "usage: [GPU_FLEET_ENROL_CODE=CODE] install.sh --url PORTAL_URL --sha256 WHEEL=HEX... [--code CODE] [--hostname NAME] [--root DIR] [--insecure-http] [--ca-file PEM] [--python PYTHON]" >&2; exit 2; }
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
[ -n "$URL" ] || usage
[ -n "$HASHES" ] || { echo "no --sha256: copy the whole install line again from the portal's Add hosts page" >&2; exit 2; }
URL="${URL%/}"
ROOT="${ROOT%/}"
PREFIX="/opt/gpu-fleet-agent"
CONFIG_DIR="/etc/gpu-fleet-agent"
VENV="$ROOT$PREFIX"
REDEEMED="$ROOT$CONFIG_DIR/enrolment.json"
STEP=""
CREATED_VENV=""
SERVICE_TOUCHED=""
ANSWER=""

cleanup() {
  status=$?
  [ -n "$ANSWER" ] && rm -f "$ANSWER"
  [ $status -eq 0 ] && return
  echo "gpu-fleet-agent install FAILED at step: $STEP" >&2
  if [ -n "$SERVICE_TOUCHED" ]; then
    systemctl disable --now gpu-fleet-agent >/dev/null 2>&1
    rm -f "$ROOT/etc/systemd/system/gpu-fleet-agent.service"
    echo "  the service was stopped and removed; the enrolment is kept in $ROOT$CONFIG_DIR/agent.toml:" >&2
    echo "  fix the cause, then: $PREFIX/bin/gpu-fleet-agent install-service" >&2
  else
    if [ -n "$CREATED_VENV" ]; then
      rm -rf "$VENV"
      echo "  removed $VENV" >&2
    fi
    if [ -f "$REDEEMED" ]; then
      echo "  the code was redeemed: this host's token is kept in $REDEEMED (mode 0600);" >&2
      echo "  fix the cause, then run install.sh again with the same --url and no code" >&2
    fi
  fi
  exit $status
}
trap cleanup EXIT

step() { STEP="$1"; echo "==> $1"; }

# Plain HTTP only to this machine: the URL's host (after any user@, without the :port) is a
# 127.0.0.0/8 address written as four decimal numbers, localhost or [::1]; a name that merely
# begins with 127 (http://127.evil.example) or has the address as its user (http://127.0.0.1@evil)
# is another machine.
is_loopback_url() {
  rest="${1#http://}"
  host="${rest%%[/?#]*}"
  host="${host##*@}"
  case "$host" in
    \[*\]:*) port="${host##*]:}"; host="${host%:*}" ;;
    \[*\]) port="" ;;
    *:*) port="${host#*:}"; host="${host%%:*}" ;;
    *) port="" ;;
  esac
  case "$port" in *[!0-9]*) return 1 ;; esac
  case "$host" in localhost|\[::1\]) return 0 ;; esac
  is_ipv4_loopback "$host"
}
is_ipv4_loopback() {
  case "$1" in 127.*.*.*) ;; *) return 1 ;; esac
  case "$1" in *[!0-9.]*|*..*|*.) return 1 ;; esac
  set -f; old_ifs="$IFS"; IFS=.
  # shellcheck disable=SC2086 # split on the dots, on purpose
  set -- $1
  IFS="$old_ifs"; set +f
  [ $# -eq 4 ] || return 1
  for octet in "$@"; do
    case "$octet" in 0?*) return 1 ;; esac  # no leading zero (some parsers read it as octal)
    [ ${#octet} -le 3 ] && [ "$octet" -le 255 ] || return 1
  done
}

step "check: root, Python 3.11+, curl"
if [ -z "$ROOT" ] && [ "$(id -u)" != 0 ]; then echo "run as root (sudo)" >&2; exit 1; fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "$PYTHON is missing or older than 3.11" >&2; exit 1; }
command -v curl >/dev/null 2>&1 || { echo "curl is missing" >&2; exit 1; }
case "$URL" in
  https://*) ;;
  http://*) is_loopback_url "$URL" || [ -n "$INSECURE" ] || { echo "refusing the plain-HTTP portal $URL: the code and the host token would cross the network in clear (use https://, or --insecure-http on a trusted LAN)" >&2; exit 1; } ;;
  *) echo "--url must start with https:// or http://" >&2; exit 1 ;;
esac

step "enrol with the portal"
if [ -z "$CODE" ] && [ -f "$REDEEMED" ]; then
  echo "    using the token redeemed by an earlier run ($REDEEMED)"
elif [ -z "$CODE" ]; then
  echo "no enrolment code: set GPU_FLEET_ENROL_CODE (the Add hosts page's line does)" >&2; exit 1
else
  mkdir -p "$ROOT$CONFIG_DIR" || exit 1
  ANSWER="$(mktemp "$ROOT$CONFIG_DIR/.enrolment.XXXXXX")" || exit 1
  # The request is built by Python from the environment and read by curl from stdin: the code is
  # in no process's argv. No redirect is followed.
  set -- --silent --show-error --proto =https,http --header "Content-Type: application/json" \
    --data-binary @- --output "$ANSWER" --write-out "%{http_code}" "$URL/api/v1/enrol"
  [ -n "$CA_FILE" ] && set -- --cacert "$CA_FILE" "$@"
  STATUS="$(GPU_FLEET_ENROL_CODE="$CODE" ENROL_HOSTNAME="$HOSTNAME_ARG" "$PYTHON" -c '
import json, os, socket
print(json.dumps({"code": os.environ["GPU_FLEET_ENROL_CODE"], "hostname": os.environ["ENROL_HOSTNAME"] or socket.gethostname()}))
' | curl "$@")" || { echo "cannot reach the portal at $URL" >&2; exit 1; }
  CODE=""
  if [ "$STATUS" != 201 ]; then
    "$PYTHON" -c '
import json, sys
try:
    with open(sys.argv[2], encoding="utf-8") as answer:
        body = json.load(answer)
    problems = "; ".join("%s: %s" % (d.get("loc"), d.get("msg")) for d in body.get("detail") or [])
    message = body.get("error", "") + (" (%s)" % problems if problems else "")
except (OSError, ValueError, AttributeError):
    message = "not the answer of the portal (a wrong URL, or a proxy)"
print("enrolment refused, HTTP %s: %s" % (sys.argv[1], message), file=sys.stderr)
' "$STATUS" "$ANSWER"
    exit 1
  fi
  mv "$ANSWER" "$REDEEMED" || exit 1
  ANSWER=""
fi

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

step "store the host token"
set -- enrol "$URL" --redeemed --config-dir "$ROOT$CONFIG_DIR"
[ -n "$INSECURE" ] && set -- "$@" --insecure-http
[ -n "$CA_FILE" ] && set -- "$@" --ca-file "$CA_FILE"
"$VENV/bin/gpu-fleet-agent" "$@" < "$REDEEMED" || exit 1
rm -f "$REDEEMED"
CREATED_VENV=""  # enrolled: keep what is installed

step "service: user, state directory, systemd unit, start"
SERVICE_TOUCHED=1
set -- install-service --config-dir "$CONFIG_DIR" --executable "$PREFIX/bin/gpu-fleet-agent"
[ -n "$ROOT" ] && set -- "$@" --root "$ROOT"
"$VENV/bin/gpu-fleet-agent" "$@" || exit 1

step "start: the service runs"
systemctl is-active --quiet gpu-fleet-agent || { echo "gpu-fleet-agent is not running: journalctl -u gpu-fleet-agent" >&2; exit 1; }
SERVICE_TOUCHED=""
echo "gpu-fleet-agent is installed and running; check it with: $PREFIX/bin/gpu-fleet-agent doctor --config $CONFIG_DIR/agent.toml"
