"""`make demo-ldap` (`manage.py demo --ldap`): a throwaway slapd, its people printed, and they sign
in on the login form; Ctrl-C stops the directory too."""

import re
import signal
import time
from pathlib import Path

import requests

from portal.demo.directory import DEMO_PEOPLE, slapd_available
from portal.ops.supervise import free_port
from tests.conftest import skip_or_fail
from tests.ops.test_embedded import alive, descendants, embedded_env, manage_until_stopped


def test_demo_with_a_directory_signs_its_people_in(tmp_path):
    if not slapd_available():
        skip_or_fail("slapd and ldap-utils are not installed (apt-get install slapd ldap-utils)")
    env = embedded_env(tmp_path)
    del env["DEBUG"]
    log = tmp_path / "demo.log"
    port = free_port()
    command = ["demo", "--ldap", "--no-agents", "--no-slurm", "--port", str(port)]
    with manage_until_stopped(command, env, log, up_within_s=240, stop=signal.SIGINT) as demo:
        output = log.read_text()
        for name, (password, *_rest) in DEMO_PEOPLE.items():
            assert f"{name} / {password}" in output
        slapd = [pid for pid in descendants(demo.pid) if "slapd" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert slapd, output

        browser = requests.Session()
        login = browser.get(f"http://127.0.0.1:{port}/login/", timeout=10)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        answer = browser.post(
            f"http://127.0.0.1:{port}/login/",
            data={"username": "ada", "password": DEMO_PEOPLE["ada"][0], "csrfmiddlewaretoken": token},
            headers={"Referer": f"http://127.0.0.1:{port}/login/"},
            allow_redirects=False,
            timeout=10,
        )
        assert answer.status_code == 302 and answer.headers["Location"] == "/", answer.text[:2000]
    time.sleep(0.2)
    assert not [pid for pid in slapd if alive(pid)], "slapd left behind"
