"""What an admin adding the first GPU host needs on the page itself: a warning when PORTAL_URL is
unset (the line would name the address the page came from, perhaps this machine's own), what a
host needs before the line can work, and the code's expiry in the portal's date format."""

import datetime as dt
import re
import tomllib

import pytest
from django.utils import timezone

from portal.enrolment import selectors
from portal.enrolment.models import EnrolmentCode
from tests.portal_process import REPO

pytestmark = pytest.mark.django_db

URL = "/add-hosts/"


@pytest.fixture
def page(admin, client_for):
    def get(**headers):
        return client_for(admin).get(URL, **headers)

    return get


def test_an_unset_portal_url_on_localhost_is_warned_about(settings, page):
    settings.PORTAL_URL = ""
    html = page(HTTP_HOST="127.0.0.1:8000").content.decode()
    warning = re.search(r'<div class="card warn" id="portal-url-unset" role="alert">(.*?)</div>', html, re.S)
    assert warning, html
    assert "<code>http://127.0.0.1:8000</code>" in warning[1]
    assert "look for the portal on the GPU host itself" in warning[1] and "Set <code>PORTAL_URL</code>" in warning[1]


def test_an_unset_portal_url_on_a_lan_address_warns_without_the_localhost_sentence(settings, page):
    settings.PORTAL_URL = ""
    settings.ALLOWED_HOSTS = ["gpu-portal.lab"]
    html = page(HTTP_HOST="gpu-portal.lab").content.decode()
    assert 'id="portal-url-unset"' in html and "<code>http://gpu-portal.lab</code>" in html
    assert "look for the portal on the GPU host itself" not in html


def test_a_set_portal_url_warns_of_nothing(settings, page):
    settings.PORTAL_URL = "https://gpu-portal.lab.example"
    assert 'id="portal-url-unset"' not in page().content.decode()


@pytest.mark.parametrize(
    ("url", "unreachable"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://localhost:8000", True),
        ("http://[::1]:8000", True),
        ("http://127.1.2.3", True),
        ("http://app.localhost", True),
        ("http://10.0.0.5:8000", False),
        ("https://gpu-portal.lab.example", False),
        ("http://localhost.lab.example", False),
        ("not a url", False),
    ],
)
def test_which_addresses_a_gpu_host_cannot_reach(url, unreachable):
    assert selectors.install_address_unreachable(url) is unreachable


def test_the_prerequisites_are_listed_as_install_sh_checks_them(page):
    html = page().content.decode()
    section = re.search(r'<section class="card form-card" id="prerequisites">(.*?)</section>', html, re.S)[1]
    assert "Python 3.11 or newer" in section and "<code>systemd</code>" in section and "NVIDIA driver" in section
    assert "curl" in section and "sudo" in section
    # One truth: the agent's declared Python and install.sh's check say the same version.
    agents = tomllib.loads((REPO / "agents" / "pyproject.toml").read_text())
    assert agents["project"]["requires-python"] == f">={selectors.AGENT_PYTHON_MIN}"
    major, minor = selectors.AGENT_PYTHON_MIN.split(".")
    assert f"sys.version_info < ({major}, {minor})" in (REPO / "portal" / "enrolment" / "install.sh").read_text()


def test_the_expiry_is_in_the_portals_date_format(admin, client_for):
    client = client_for(admin)
    before = timezone.now()
    response = client.post(URL, {"hostname": "", "uses": 2, "expires_in_hours": 24})
    assert response.status_code == 201
    expires = timezone.localtime(EnrolmentCode.objects.get().expires_at)
    assert before + dt.timedelta(hours=23) < expires
    shown = expires.strftime("%Y-%m-%d %H:%M")
    html = response.content.decode()
    assert f"it enrols 2 hosts until {shown}." in html
    assert f'<td class="nowrap">{shown}</td>' in html
    assert "p.m." not in html and "a.m." not in html  # Django's English default format


def test_the_copy_button_stands_beside_the_line(admin, client_for):
    html = client_for(admin).post(URL, {"hostname": "", "uses": 1, "expires_in_hours": 1}).content.decode()
    assert 'data-copy="install-command"' in html and '<script src="/static/enrolment/add_hosts.js">' in html
    assert "onclick" not in html  # the CSP allows no inline handlers
