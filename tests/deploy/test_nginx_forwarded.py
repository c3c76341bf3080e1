"""A client's own X-Forwarded-For, through the shipped nginx site in front of a web node as
production runs it (`manage.py serve`, TRUST_PROXY_HEADERS=true), names none of the addresses
the audit trail records, the login lockout counts or the enrolment throttle limits: the node
believes nginx's entry only.

Clients connect to nginx from different loopback addresses (127.0.0.2, .3, ...), nginx reaches
the node from 127.0.0.1: the address the portal records is the one nginx saw."""

import http.client
import json
import re
import ssl
import sys
import urllib.parse
from pathlib import Path

import pytest

from portal.ops.supervise import ChildFailed, free_port, serving
from tests.deploy.test_nginx_site import nginx_serving
from tests.portal_process import manage, migrate, portal_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "a long enough password 42"
LIMIT = 3  # LOGIN_FAILURE_LIMIT for this portal

CREATE_USERS = f"""
from django.contrib.auth import get_user_model
from portal.accounts.roles import ROLE_ADMIN
from portal.accounts.services import user_set_role
for name in ("alice", "bob", "carol", "dave"):
    user = get_user_model().objects.create_user(name, password={PASSWORD!r})
    user_set_role(user=user, role=ROLE_ADMIN)
"""

AUDITED_ADDRESSES = """
import json
from auditlog.models import LogEntry
from portal.fleet.models import Host
hosts = {str(h.pk): h.hostname for h in Host.objects.all()}
print(json.dumps({hosts[e.object_pk]: e.remote_addr for e in LogEntry.objects.filter(content_type__model="host")}))
"""

FORGED = ["203.0.113.66", "127.0.0.9, 198.51.100.1", "not-an-address", "' OR 1=1 --", "fe80::1%eth0", "[::1]"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("forwarded")
    var_dir = tmp / "var"
    var_dir.mkdir()
    env = portal_env(var_dir, TRUST_PROXY_HEADERS="127.0.0.1/32",
                     LOGIN_FAILURE_LIMIT=str(LIMIT))  # fmt: skip
    migrate(env)
    manage(env, "shell", "-c", CREATE_USERS)
    port = free_port()
    command = [sys.executable, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = var_dir / "serve.log"
    try:
        with (
            serving("the web node", command, url=f"http://127.0.0.1:{port}/healthz", env=env, log=log, cwd=REPO),
            nginx_serving(tmp, upstream=f"127.0.0.1:{port}", static=tmp) as (https_port, _),
        ):
            yield {"https": https_port, "node": port, "env": env}
    except ChildFailed as error:
        raise AssertionError(f"{error}:\n{log.read_text()[-4000:]}") from None


class Client:
    """HTTPS to nginx from one loopback address, keeping the portal's cookies."""

    def __init__(self, port: int, source: str, *, tls: bool = True):
        self.port, self.source, self.tls, self.cookies = port, source, tls, {}
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE

    def request(self, method: str, path: str, form: dict | None = None, forwarded_for: str | None = None):
        if self.tls:
            connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30,
                                                     source_address=(self.source, 0))  # fmt: skip
        else:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30, source_address=(self.source, 0))
        origin = f"{'https' if self.tls else 'http'}://127.0.0.1" + ("" if self.tls else f":{self.port}")
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()), "Origin": origin}
        body = None
        if form is not None:
            body = urllib.parse.urlencode({**form, "csrfmiddlewaretoken": self.cookies.get("csrftoken", "")})
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if forwarded_for is not None:
            headers["X-Forwarded-For"] = forwarded_for
            headers["X-Forwarded-Port"] = "4444"
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            text = response.read().decode()
        finally:
            connection.close()
        for cookie in response.headers.get_all("Set-Cookie") or []:
            name, value = cookie.split(";", 1)[0].split("=", 1)
            self.cookies[name] = value
        return response.status, text

    def enrol(self, forwarded_for: str) -> int:
        """An agent's enrolment with a code that does not exist: refused, and counted per address."""
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30,
                                                 source_address=(self.source, 0))  # fmt: skip
        body = json.dumps({"code": "gfe_not-a-code", "hostname": "dgx-new"})
        headers = {"Content-Type": "application/json", "X-Forwarded-For": forwarded_for}
        try:
            connection.request("POST", "/api/v1/enrol", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
        finally:
            connection.close()
        return response.status

    def login(self, username: str, password: str, forwarded_for: str | None = None) -> int:
        status, page = self.request("GET", "/login/")
        assert status == 200 and re.search(r'name="csrfmiddlewaretoken"', page)
        return self.request("POST", "/login/", {"username": username, "password": password}, forwarded_for)[0]


def test_the_audit_trail_records_the_address_nginx_saw(site):
    alice = Client(site["https"], "127.0.0.3")
    assert alice.login("alice", PASSWORD, forwarded_for="203.0.113.66") == 302
    for number, forged in enumerate(FORGED):
        form = {"hostname": f"dgx-forged-{number}", "rack": "R1", "status": "active"}
        status, page = alice.request("POST", "/hosts/new/", form, forwarded_for=forged)
        assert status == 302, (forged, page[:2000])
    audited = json.loads(manage(site["env"], "shell", "-c", AUDITED_ADDRESSES).stdout.strip().splitlines()[-1])
    forged = {name: address for name, address in audited.items() if name.startswith("dgx-forged-")}
    assert forged == {f"dgx-forged-{number}": "127.0.0.3" for number in range(len(FORGED))}


def test_the_lockout_counts_the_address_nginx_saw(site):
    """A new forged address for every guess gets the guesser nowhere: locked out after LIMIT."""
    guesser = Client(site["https"], "127.0.0.2")
    for attempt in range(LIMIT - 1):
        assert guesser.login("bob", f"guess {attempt}", forwarded_for=f"198.51.100.{attempt + 1}") == 200
    # The LIMIT-th failure is answered with the lockout already.
    assert guesser.login("bob", "guess again", forwarded_for="198.51.100.99") == 429
    assert guesser.login("bob", PASSWORD, forwarded_for="not-an-address") == 429
    # Someone else, from their own address, is not locked out by it.
    assert Client(site["https"], "127.0.0.6").login("bob", PASSWORD) == 302


def test_the_enrolment_throttle_counts_the_address_nginx_saw(site):
    from portal.enrolment.services import REFUSALS_MAX

    agent = Client(site["https"], "127.0.0.9")
    answers = [agent.enrol(forwarded_for=f"198.51.100.{n + 1}") for n in range(REFUSALS_MAX)]
    assert 429 not in answers and all(400 <= status < 500 for status in answers), answers
    assert agent.enrol(forwarded_for="203.0.113.200") == 429
    assert Client(site["https"], "127.0.0.10").enrol(forwarded_for="127.0.0.9") != 429


def test_claiming_an_admins_address_locks_out_only_the_claimant(site):
    attacker = Client(site["https"], "127.0.0.4")
    for attempt in range(LIMIT + 1):
        attacker.login("carol", f"guess {attempt}", forwarded_for="127.0.0.5")
    assert attacker.login("carol", PASSWORD, forwarded_for="127.0.0.5") == 429
    assert Client(site["https"], "127.0.0.5").login("carol", PASSWORD) == 302


def test_past_the_firewall_the_headers_count_for_nothing(site):
    """TRUST_PROXY_HEADERS names nginx (127.0.0.1 here): a client that reaches the node itself
    keeps its own address, whatever it claims, in the lockout and in the audit trail."""
    guesser = Client(site["node"], "127.0.0.7", tls=False)
    for attempt in range(LIMIT - 1):
        assert guesser.login("dave", f"guess {attempt}", forwarded_for=f"198.51.100.{attempt + 20}") == 200
    assert guesser.login("dave", "guess again", forwarded_for="198.51.100.99") == 429
    direct = Client(site["node"], "127.0.0.8", tls=False)
    assert direct.login("dave", PASSWORD, forwarded_for="127.0.0.7") == 302
    form = {"hostname": "dgx-direct", "rack": "R1", "status": "active"}
    status, page = direct.request("POST", "/hosts/new/", form, forwarded_for="203.0.113.66")
    assert status == 302, page[:2000]
    audited = json.loads(manage(site["env"], "shell", "-c", AUDITED_ADDRESSES).stdout.strip().splitlines()[-1])
    assert audited["dgx-direct"] == "127.0.0.8"
