"""Who may do what: every role against every page, by GET and by POST."""

from urllib.parse import parse_qs, urlsplit

import pytest
from auditlog.models import LogEntry
from django.utils import timezone

from portal.fleet.models import Gpu, Host, MaintenanceRecord
from tests.core.pages import form_data
from tests.factories import GpuFactory, HostFactory, RecordFactory

pytestmark = pytest.mark.django_db

ROLES = ["admin", "technician", "viewer", "outsider"]


@pytest.fixture
def world():
    host = HostFactory(hostname="dgx-01")
    gpu = GpuFactory(host=host, index=0, uuid="GPU-with-history")
    spare_gpu = GpuFactory(host=host, index=1, uuid="GPU-spare")
    record = RecordFactory(gpu=gpu)
    empty_host = HostFactory(hostname="spare-host")
    return {"host": host, "gpu": gpu, "spare_gpu": spare_gpu, "record": record, "empty_host": empty_host}


def cleaning():
    return form_data({"performed_at": timezone.now(), "performed_by": "Li Wei", "dust_level": "none"})


# page: (url, POST data for a valid write, access class). Deletes and edits of hosts and GPUs act
# on objects without history, so an allowed POST really succeeds.
PAGES = {
    "fleet": (lambda w: "/", None, "read"),
    "host": (lambda w: "/hosts/dgx-01/", None, "read"),
    "gpu": (lambda w: "/gpus/GPU-with-history/", None, "read"),
    "record": (lambda w: f"/records/{w['record'].pk}/", None, "read"),
    "search": (lambda w: "/search/?q=dgx", None, "read"),
    "audit": (lambda w: "/audit/", None, "read"),
    "host-create": (lambda w: "/hosts/new/", lambda w: {"hostname": "new-host", "status": "active"}, "fleet"),
    "host-edit": (
        lambda w: "/hosts/spare-host/edit/",
        lambda w: {"hostname": "spare-host", "status": "active", "rack": "R9"},
        "fleet",
    ),
    "host-delete": (lambda w: "/hosts/spare-host/delete/", lambda w: {}, "fleet"),
    "gpu-create": (
        lambda w: "/gpus/new/",
        lambda w: {"uuid": "GPU-new", "host": w["host"].pk, "index": 2, "status": "in_service"},
        "fleet",
    ),
    "gpu-edit": (
        lambda w: "/gpus/GPU-spare/edit/",
        lambda w: {"uuid": "GPU-spare", "host": w["host"].pk, "index": 1, "status": "out_for_repair"},
        "fleet",
    ),
    "gpu-delete": (lambda w: "/gpus/GPU-spare/delete/", lambda w: {}, "fleet"),
    "gpu-record-create": (lambda w: "/gpus/GPU-spare/records/new/?kind=cleaning", lambda w: cleaning(), "record"),
    "host-record-create": (lambda w: "/hosts/dgx-01/records/new/?kind=cleaning", lambda w: cleaning(), "record"),
    "record-edit": (lambda w: f"/records/{w['record'].pk}/edit/", lambda w: cleaning(), "record"),
    "record-delete": (lambda w: f"/records/{w['record'].pk}/delete/", lambda w: {}, "delete"),
    "admin-index": (lambda w: "/admin/", None, "admin"),
}

# access class -> roles allowed
ALLOWED = {
    "read": {"admin", "technician", "viewer"},
    "fleet": {"admin"},
    "record": {"admin", "technician"},
    "delete": {"admin"},
    "admin": {"admin"},
}


def expected(access, method, role):
    allowed = role in ALLOWED[access]
    if access == "admin":
        # The admin site sends everyone without the admin role to its own login page.
        return 200 if allowed else 302
    if method == "GET":
        return 200 if allowed else 403
    if access == "read":
        return 405 if allowed else 403  # read-only pages have no POST
    return 302 if allowed else 403


MATRIX = [(page, method, role) for page in PAGES for method in ("GET", "POST") for role in ROLES]


def snapshot():
    return (
        list(Host.objects.values_list("hostname", "rack", "status")),
        list(Gpu.objects.values_list("uuid", "status")),
        list(MaintenanceRecord.objects.values_list("pk", "dust_level", "performed_by")),
        LogEntry.objects.count(),
    )


@pytest.mark.parametrize(("page", "method", "role"), MATRIX, ids=["-".join(case) for case in MATRIX])
def test_permission_matrix(page, method, role, world, actors, client_for):
    url_for, data_for, access = PAGES[page]
    client = client_for(actors[role])
    url = url_for(world)
    before = snapshot()
    data = data_for(world) if data_for else {}
    response = client.get(url) if method == "GET" else client.post(url, data)
    want = expected(access, method, role)
    assert response.status_code == want, response.content.decode()[:2000]
    if method == "POST" and want != 302:
        assert snapshot() == before, "a refused request changed something"
    if method == "POST" and want == 302 and access != "admin":
        assert snapshot() != before, "an allowed write did not write"
        assert LogEntry.objects.filter(actor=actors[role]).exists()
    if access == "admin" and want == 302:
        assert response["Location"].startswith("/admin/login/")


ALL_URLS = [(page, method) for page in PAGES for method in ("GET", "POST")] + [
    ("attachment", "GET"),
]


@pytest.mark.parametrize(("page", "method"), ALL_URLS, ids=["-".join(c) for c in ALL_URLS])
def test_anonymous_is_sent_to_login(page, method, world, client):
    url = {"attachment": "/attachments/1/"}.get(page) or PAGES[page][0](world)
    before = snapshot()
    response = client.get(url) if method == "GET" else client.post(url, {"hostname": "x"})
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert location.path == ("/admin/login/" if page == "admin-index" else "/login/")
    assert parse_qs(location.query)["next"] == [url]
    assert snapshot() == before


def test_healthz_is_public(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_login_page_is_public_and_logs_in(client, viewer):
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "charlie", "password": "correct horse battery staple"})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_login_with_wrong_password_fails(client, viewer):
    response = client.post("/login/", {"username": "charlie", "password": "wrong"})
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize(
    ("role", "shown", "hidden"),
    [
        ("admin", ["/hosts/dgx-01/edit/", "/hosts/dgx-01/delete/", "Add record", 'href="/admin/"'], []),
        ("technician", ["Add record"], ["/hosts/dgx-01/edit/", "/hosts/dgx-01/delete/", 'href="/admin/"']),
        ("viewer", [], ["Add record", "/hosts/dgx-01/edit/", "/hosts/dgx-01/delete/", 'href="/admin/"']),
    ],
)
def test_buttons_follow_the_role(role, shown, hidden, world, actors, client_for):
    html = client_for(actors[role]).get("/hosts/dgx-01/").content.decode()
    for text in shown:
        assert text in html
    for text in hidden:
        assert text not in html
