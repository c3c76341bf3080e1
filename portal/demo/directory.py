"""A throwaway OpenLDAP directory (Debian's slapd) for `manage.py demo --ldap` and the tests.

Everything lives in a temporary folder: a slapd.conf with an mdb database, the schemas from
/etc/ldap/schema, a free loopback port. The directory holds people (inetOrgPerson, with
passwords) and three groupOfNames for the portal's roles; `directory_load` adds an LDIF."""

import contextlib
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BASE_DN = "dc=lab,dc=example"
ROOT_DN = f"cn=admin,{BASE_DN}"
PEOPLE_DN = f"ou=people,{BASE_DN}"
GROUPS_DN = f"ou=groups,{BASE_DN}"
SERVICE_DN = f"cn=portal,ou=services,{BASE_DN}"
ROLE_GROUP_DNS = {role: f"cn=portal-{role}s,{GROUPS_DN}" for role in ("admin", "technician", "viewer")}
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")

# The demo's people: user name -> (password, given name, surname, role group or None).
DEMO_PEOPLE = {
    "ada": ("ada-pass-1", "Ada", "Lovelace", "admin"),
    "tess": ("tess-pass-1", "Tess", "Nguyen", "technician"),
    "vic": ("vic-pass-1", "Vic", "Okafor", "viewer"),
    "nora": ("nora-pass-1", "Nora", "Nobody", None),
}


def slapd_available() -> bool:
    return bool(shutil.which("slapd") and shutil.which("ldapadd") and Path("/etc/ldap/schema/core.schema").exists())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Directory:
    uri: str
    root_password: str
    folder: Path
    process: subprocess.Popen = field(repr=False)

    def settings(self) -> dict:
        """The portal's LDAP_* environment for this directory."""
        return {
            "LDAP_SERVER_URI": self.uri,
            "LDAP_BIND_DN": SERVICE_DN,
            "LDAP_BIND_PASSWORD": self.root_password,
            "LDAP_USER_SEARCH_BASE": PEOPLE_DN,
            "LDAP_ROLE_GROUPS": ";".join(f"{role}={dn}" for role, dn in ROLE_GROUP_DNS.items()),
        }

    def ldif_apply(self, ldif: str, *, modify: bool = False) -> None:
        path = self.folder / f"change-{time.monotonic_ns()}.ldif"
        path.write_text(ldif)
        command = ["ldapmodify" if modify else "ldapadd", "-x", "-H", self.uri, "-D", ROOT_DN]
        subprocess.run([*command, "-w", self.root_password, "-f", str(path)], check=True, capture_output=True)

    def member_set(self, role: str, usernames: list[str]) -> None:
        """Make the role's group hold exactly these people (a groupOfNames needs one member: the
        service account stands in for an empty group)."""
        members = [f"uid={name},{PEOPLE_DN}" for name in usernames] or [SERVICE_DN]
        lines = [f"dn: {ROLE_GROUP_DNS[role]}", "changetype: modify", "replace: member"]
        lines += [f"member: {dn}" for dn in members]
        self.ldif_apply("\n".join(lines) + "\n", modify=True)


def people_ldif(people: dict) -> str:
    """inetOrgPerson entries and the three role groups for `people` (see DEMO_PEOPLE)."""
    blocks = []
    for name, (password, given, surname, _role) in people.items():
        blocks.append(
            "\n".join(
                [
                    f"dn: uid={name},{PEOPLE_DN}",
                    "objectClass: inetOrgPerson",
                    f"uid: {name}",
                    f"cn: {given} {surname}",
                    f"givenName: {given}",
                    f"sn: {surname}",
                    f"mail: {name}@lab.example",
                    f"userPassword: {password}",
                ]
            )
        )
    for role, dn in ROLE_GROUP_DNS.items():
        members = [f"uid={name},{PEOPLE_DN}" for name, person in people.items() if person[3] == role] or [SERVICE_DN]
        blocks.append(
            "\n".join(
                [f"dn: {dn}", "objectClass: groupOfNames", f"cn: portal-{role}s"] + [f"member: {m}" for m in members]
            )
        )
    return "\n\n".join(blocks) + "\n"


def _base_ldif(service_password: str) -> str:
    return (
        "\n\n".join(
            [
                f"dn: {BASE_DN}\nobjectClass: dcObject\nobjectClass: organization\ndc: lab\no: Lab",
                f"dn: ou=people,{BASE_DN}\nobjectClass: organizationalUnit\nou: people",
                f"dn: ou=groups,{BASE_DN}\nobjectClass: organizationalUnit\nou: groups",
                f"dn: ou=services,{BASE_DN}\nobjectClass: organizationalUnit\nou: services",
                f"dn: {SERVICE_DN}\nobjectClass: person\ncn: portal\nsn: portal\nuserPassword: {service_password}",
            ]
        )
        + "\n"
    )


@contextlib.contextmanager
def directory_running(people: dict | None = None, *, folder: Path | None = None):
    """Start slapd on a free loopback port with the base entries and `people`; stop it after."""
    with contextlib.ExitStack() as stack:
        if folder is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="portal-slapd-")))
        (folder / "db").mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(16)  # throwaway, this run only
        includes = "\n".join(f"include /etc/ldap/schema/{name}.schema" for name in SCHEMAS)
        (folder / "slapd.conf").write_text(
            f"""{includes}
pidfile {folder}/slapd.pid
moduleload back_mdb
database mdb
maxsize 33554432
suffix "{BASE_DN}"
rootdn "{ROOT_DN}"
rootpw {password}
directory {folder}/db
access to attrs=userPassword by anonymous auth by self read by * none
access to * by * read
"""
        )
        port = free_port()
        uri = f"ldap://127.0.0.1:{port}"
        process = subprocess.Popen(
            ["slapd", "-d", "0", "-h", f"{uri}/", "-f", str(folder / "slapd.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        stack.callback(_stop, process)
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"slapd did not start: {process.stderr.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.05)
        directory = Directory(uri=uri, root_password=password, folder=folder, process=process)
        directory.ldif_apply(_base_ldif(password) + "\n" + people_ldif(DEMO_PEOPLE if people is None else people))
        yield directory


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
