"""docs/production.md followed literally: the shell blocks of its "Install" section, run as
written, in order, against a fresh clone of HEAD and a fresh database, then the roles started
as its systemd units start them. The portal then shows Chinese pages to a `zh-hans` visitor, both
wheels under /agent/ (whole, with the sha256 the install line carries), and notification links
on PORTAL_URL.

What stands in for the machine (nothing else is changed in the commands):
- the absolute paths (/opt/gpu-fleet, /etc/gpu-fleet, /etc/systemd/system, /var/lib/gpu-fleet,
  /srv/gpu-fleet) live under a temporary root;
- `sudo` runs the command as this user; `apt-get` and `useradd` only record what they were asked;
  `install -o/-g` keeps this user as owner;
- `git clone` clones this checkout's HEAD (no .mo files: they are never committed);
- `python3 -m venv .venv` links the suite's installed packages, and that venv's `pip install`
  checks that they satisfy requirements.txt without installing (`--dry-run --no-index`);
- `sudoedit` is the admin's edit: the secret, a scratch SQLite database (no Redis: the embedded
  broker under VAR_DIR), the temporary root's paths, a free port, PORTAL_URL;
- `systemctl enable --now UNIT` starts the unit's ExecStart as systemd would: its
  WorkingDirectory, only its EnvironmentFile's variables (plus PATH and HOME, for pip's cache),
  ${VAR}, %i and %H expanded.
"""

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from portal.ops.supervise import free_port
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "production.md"
PORTAL_URL = "https://fleet.example.test"
HOST = "gpu-portal.lab.example"  # ALLOWED_HOSTS in deploy/portal.env.example
ABSOLUTE = re.compile(
    r"(?<![\w/.-])(/opt/gpu-fleet|/etc/gpu-fleet|/etc/systemd/system|/var/lib/gpu-fleet|/srv/gpu-fleet)(?![\w-])"
)

SUDO = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -u) shift 2 ;; --preserve-env|-E) shift ;; *) break ;; esac; done
exec "$@"
"""
RECORD = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
"""
INSTALL = """#!/bin/sh
# install(1) without -o/-g: the owners of a real machine do not exist here
for arg; do shift; case "$skip$arg" in -o|-g) skip=1 ;; 1*) skip= ;; *) set -- "$@" "$arg" ;; esac; done
exec /usr/bin/install "$@"
"""
GIT = """#!/bin/sh
# git clone URL DEST: this checkout's HEAD instead of the mirror
if [ "$1" = clone ]; then
  for dest; do :; done
  /usr/bin/git clone -q --no-checkout "{repo}" "$dest" && exec /usr/bin/git -C "$dest" checkout -q "{head}"
fi
exec /usr/bin/git "$@"
"""
PYTHON3 = """#!{python}
import os, sys
from pathlib import Path
if sys.argv[1:] == ["-m", "venv", ".venv"]:
    shared, venv = Path({shared!r}), Path(".venv")
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / {pyver!r}).mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text((shared / "pyvenv.cfg").read_text())
    (venv / "lib" / {pyver!r} / "site-packages").symlink_to(shared / "lib" / {pyver!r} / "site-packages")
    for script in (shared / "bin").iterdir():
        if not script.name.startswith(("python", "pip", "activate", "Activate")):
            (venv / "bin" / script.name).symlink_to(script)
    for name in ("python", "python3", {pyexe!r}):
        (venv / "bin" / name).symlink_to({base!r})
    pip = venv / "bin" / "pip"
    pip.write_text('#!/bin/sh\\nexec "$(dirname "$0")/python" -m pip "$@" --dry-run --no-index -q\\n')
    pip.chmod(0o755)
else:
    os.execv({base!r}, [{base!r}, *sys.argv[1:]])
"""
SUDOEDIT = """#!{python}
import json, sys
from pathlib import Path
edits = json.loads(Path({edits!r}).read_text())
path = Path(sys.argv[-1])
lines = [line for line in path.read_text().splitlines() if line.split("=", 1)[0] not in edits]
path.write_text("\\n".join(lines + [f"{{k}}={{v}}" for k, v in edits.items() if v is not None]) + "\\n")
"""
SYSTEMCTL = """#!{python}
import configparser, os, re, socket, subprocess, sys
from pathlib import Path
root, state = Path({root!r}), Path({state!r})
ABSOLUTE = re.compile({absolute!r})
args = sys.argv[1:]
if args == ["daemon-reload"]:
    sys.exit(0)
assert args[:2] == ["enable", "--now"], args
for name in args[2:]:
    template, _, instance = name.partition("@")
    file = root / "etc/systemd/system" / (f"{{template}}@.service" if instance else f"{{name}}.service")
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(file)
    service = unit["Service"]
    env = {{"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}}
    env_file = Path(ABSOLUTE.sub(lambda m: str(root) + m.group(1), service["EnvironmentFile"]))
    for line in env_file.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    command = service["ExecStart"].replace("%i", instance).replace("%H", socket.gethostname())
    command = re.sub(r"\\$\\{{(\\w+)\\}}", lambda m: env.get(m.group(1), ""), command)
    command = ABSOLUTE.sub(lambda m: str(root) + m.group(1), command)
    cwd = ABSOLUTE.sub(lambda m: str(root) + m.group(1), service["WorkingDirectory"])
    log = open(state / f"{{name}}.log", "ab")
    child = subprocess.Popen(command.split(), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    with open(state / "pids", "a") as pids:
        pids.write(f"{{child.pid}}\\n")
"""

NOTIFY = """
from django.contrib.auth import get_user_model
from django.utils import timezone
from portal.fleet.models import Host
from portal.maintenance.models import Subscription
from portal.maintenance.services.notify import notify_ticket
from portal.maintenance.services.tickets import ticket_fire
user = get_user_model().objects.create(username="oncall")
Subscription.objects.create(user=user, channel="email", target="oncall@lab.example", min_severity="info")
host = Host.objects.create(hostname="dgx-docs-01")
ticket, outcome = ticket_fire(rule="agent_silent", host_id=host.pk, gpu_id=None, at=timezone.now())
notify_ticket(ticket=ticket, event=outcome)  # as the rules stage does after firing
print("TICKET", ticket.get_absolute_url())
"""


def install_blocks() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Install, on every web and worker node") : text.index("## nginx")]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def shims(directory: Path, *, root: Path, state: Path, edits: Path) -> None:
    shared = Path(sys.prefix)
    base = os.path.realpath(sys.executable)
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    files = {
        "sudo": SUDO,
        "apt-get": RECORD.format(log=state / "machine.log"),
        "useradd": RECORD.format(log=state / "machine.log"),
        "install": INSTALL,
        "git": GIT.format(repo=REPO, head=head.stdout.strip()),
        "python3": PYTHON3.format(python=base, shared=str(shared), pyver=pyver, pyexe=Path(base).name, base=base),
        "sudoedit": SUDOEDIT.format(python=base, edits=str(edits)),
        "systemctl": SYSTEMCTL.format(python=base, root=str(root), state=str(state), absolute=ABSOLUTE.pattern),
    }
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)


def get(port: int, path: str, **headers: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Host": HOST, "X-Forwarded-Proto": "https", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError):  # not listening yet
        return 0, b""


def wait_for(predicate, *, timeout_s: float, what: str, logs: Path):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(1)
    tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs.glob("*.log"))
    raise AssertionError(f"{what} within {timeout_s} s:\n{tails}")


@pytest.fixture
def machine(tmp_path):
    if shutil.which("msgfmt") is None:
        skip_or_fail("msgfmt missing (Debian's gettext): the start compiles the catalogues with it")
    root, state = tmp_path / "root", tmp_path / "state"
    for folder in ("opt", "etc/systemd/system", "srv/gpu-fleet"):  # what a Debian machine (and its NFS mount) has
        (root / folder).mkdir(parents=True)
    state.mkdir()
    port = free_port()
    edits = tmp_path / "edits.json"
    edits.write_text(
        json.dumps(
            {
                "SECRET_KEY": secrets.token_urlsafe(50), "PORTAL_URL": PORTAL_URL,
                "DATABASE_URL": f"sqlite:///{root}/var/lib/gpu-fleet/portal.sqlite3", "REDIS_URL": None,
                "VAR_DIR": f"{root}/var/lib/gpu-fleet", "MEDIA_ROOT": f"{root}/srv/gpu-fleet/media",
                "WEB_BIND": "127.0.0.1", "WEB_PORT": str(port), "WORKER_CONCURRENCY": "1",
                "TRUST_PROXY_HEADERS": "127.0.0.1/32",  # the test plays nginx: its X-Forwarded-Proto counts
            }
        )
    )  # fmt: skip
    shims(tmp_path / "bin", root=root, state=state, edits=edits)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_", "VAR_DIR"))}
    env = {k: v for k, v in env.items() if k not in {"DEBUG", "SECRET_KEY", "VIRTUAL_ENV"}}
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    try:
        yield root, state, port, env
    finally:
        pids = state / "pids"
        started = [int(line) for line in (pids.read_text().split() if pids.exists() else [])]
        for sig in (signal.SIGTERM, signal.SIGKILL):  # each unit's process group, started by the systemctl stand-in
            for pid in started:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, sig)
            time.sleep(2)


def test_following_production_md_gives_chinese_pages_both_wheels_and_links_on_portal_url(machine):
    root, state, port, env = machine
    blocks = install_blocks()
    assert len(blocks) == 4, "the Install section's blocks: install, once, every web node, start"
    for block in blocks:
        script = ABSOLUTE.sub(lambda m: str(root) + m.group(1), block)
        result = subprocess.run(["sh", "-e", "-c", script], cwd=state, env=env, capture_output=True, text=True,
                                timeout=600)  # fmt: skip
        assert result.returncode == 0, f"{block}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    code = root / "opt/gpu-fleet"
    assert not list((code / "locale").rglob("*.mo")), "a fresh clone has no compiled catalogues"
    assert "gettext" in (state / "machine.log").read_text()
    units = {path.name for path in state.glob("*.log")} - {"machine.log"}
    assert units == {"gpu-fleet-web.log", "gpu-fleet-worker@1.log", "gpu-fleet-worker@2.log", "gpu-fleet-beat.log"}

    wait_for(lambda: get(port, "/healthz")[0] == 200, timeout_s=180, what="the web unit did not answer", logs=state)

    # Chinese pages, from the catalogues the start compiled under VAR_DIR.
    status, login = get(port, "/login/", **{"Accept-Language": "zh-hans"})
    # "GPU 集群门户" is the portal's own catalogue (Django's would translate "Log in" by itself).
    assert status == 200 and 'lang="zh-hans"' in login.decode() and "GPU 集群门户" in login.decode()
    assert (root / "var/lib/gpu-fleet/locale/zh_Hans/LC_MESSAGES/django.mo").exists()

    # Both wheels under /agent/, whole, with the sha256 the install line carries.
    status, index = get(port, "/agent/")
    assert status == 200 and b"Missing" not in index, index
    version = json.loads(get(port, "/agent/version")[1])
    names = sorted(version["files"])
    assert [name.split("-")[0] for name in names] == ["gpu_fleet_agent", "nvidia_ml_py"] and version["missing"] == []
    assert all(f'href="{name}"'.encode() in index for name in names)
    with ThreadPoolExecutor(max_workers=8) as pool:
        downloads = list(pool.map(lambda name: (name, get(port, f"/agent/{name}")), names * 8))
    for name, (status, data) in downloads:
        assert status == 200 and hashlib.sha256(data).hexdigest() == version["files"][name], name
    web_log = (state / "gpu-fleet-web.log").read_text()
    assert "is missing" not in web_log and "not compiled" not in web_log, web_log[-3000:]

    # A notification's link is on PORTAL_URL: a ticket opened, the e-mail sent by a worker unit.
    shell = textwrap.dedent(f"""
        cd {code} && set -a && . {root}/etc/gpu-fleet/portal.env && set +a
        .venv/bin/python manage.py shell -c '{NOTIFY}'
    """)
    result = subprocess.run(["sh", "-e", "-c", shell], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    link = PORTAL_URL + result.stdout.split("TICKET", 1)[1].split()[0]

    def mailed() -> bool:
        return any(link in (state / f"gpu-fleet-worker@{n}.log").read_text(errors="replace") for n in (1, 2))

    wait_for(mailed, timeout_s=120, what=f"no worker mailed a notification with {link}", logs=state)
