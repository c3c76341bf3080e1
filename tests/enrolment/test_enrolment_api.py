"""Enrolment codes over the API: made by admins, exchanged once for a host token (portal-api-v1 "Agent enrolment")."""

import datetime as dt

import pytest
from auditlog.models import LogEntry
from django.test import Client
from django.utils import timezone

from portal.enrolment.models import EnrolmentAttempt, EnrolmentCode
from portal.enrolment.services import REFUSALS_MAX
from portal.fleet.models import Host
from portal.telemetry.models import HostToken
from portal.telemetry.services import host_token_authenticate, host_token_issue, host_token_revoke

pytestmark = pytest.mark.django_db


def make_code(client, **body):
    response = client.post("/api/v1/enrolments", body, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def enrol(code, hostname, address="10.0.0.9"):
    return Client(REMOTE_ADDR=address).post(
        "/api/v1/enrol", {"code": code, "hostname": hostname}, content_type="application/json"
    )


def locs(response):
    return [item["loc"] for item in response.json()["detail"]]


@pytest.fixture
def admin_client(admin, client_for):
    return client_for(admin)


def test_admin_makes_a_code_shown_once_and_listed_without_it(admin_client):
    made = make_code(admin_client, hostname="dgx-01", expires_in_hours=2)
    assert set(made) == {"id", "code", "hostname", "expires_at", "uses_left", "install_command"}
    assert made["hostname"] == "dgx-01" and made["uses_left"] == 1 and made["code"].startswith("gfe_")
    assert made["code"] in made["install_command"] and "http://testserver/agent/install.sh" in made["install_command"]
    stored = EnrolmentCode.objects.get(pk=made["id"])
    assert made["code"] not in stored.secret_hash and stored.secret_hash != made["code"]
    listed = admin_client.get("/api/v1/enrolments").json()
    assert listed["count"] == 1
    item = listed["items"][0]
    assert set(item) == {"id", "hostname", "expires_at", "uses_left", "revoked", "created_by", "created_at"}
    assert item["created_by"] == "alice" and item["revoked"] is False
    assert made["code"] not in str(listed)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"expires_in_hours": 0}, "expires_in_hours"),
        ({"expires_in_hours": 721}, "expires_in_hours"),
        ({"uses": 0}, "uses"),
        ({"uses": 1001}, "uses"),
        ({"hostname": "bad host;rm"}, "hostname"),
        ({"uses": "many"}, "uses"),
    ],
)
def test_bad_code_requests_are_400_naming_the_field(admin_client, body, loc):
    response = admin_client.post("/api/v1/enrolments", body, content_type="application/json")
    assert response.status_code == 400
    assert any(item.endswith(loc) for item in locs(response))
    assert EnrolmentCode.objects.count() == 0


@pytest.mark.parametrize("role", ["technician", "viewer", "outsider"])
def test_only_admins_manage_codes(actors, client_for, role, admin_client):
    client = client_for(actors[role])
    assert client.post("/api/v1/enrolments", {}, content_type="application/json").status_code == 403
    assert client.get("/api/v1/enrolments").status_code == 403
    made = make_code(admin_client)
    assert client.delete(f"/api/v1/enrolments/{made['id']}").status_code == 403
    assert Client().get("/api/v1/enrolments").status_code == 401


def test_exchange_creates_the_host_and_a_working_token(admin_client, admin):
    made = make_code(admin_client)
    response = enrol(made["code"], "gpu-new-01")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["hostname"] == "gpu-new-01" and body["ingest_url"] == "http://testserver/api/v1/ingest"
    token = host_token_authenticate(body["token"])
    assert token is not None and token.host.hostname == "gpu-new-01"
    assert HostToken.objects.get().secret_hash != body["token"]  # stored hashed
    # Single use by default.
    again = enrol(made["code"], "gpu-new-02")
    assert again.status_code == 400 and locs(again) == ["code"] and "used up" in again.json()["error"]
    assert not Host.objects.filter(hostname="gpu-new-02").exists()


def test_a_code_for_n_hosts(admin_client):
    made = make_code(admin_client, uses=2)
    assert enrol(made["code"], "n-1").status_code == 201
    assert enrol(made["code"], "n-2").status_code == 201
    assert enrol(made["code"], "n-3").status_code == 400


def test_unknown_expired_and_revoked_codes_are_400_naming_code(admin_client):
    assert locs(enrol("gfe_nope", "h1")) == ["code"]
    expired = make_code(admin_client)
    EnrolmentCode.objects.filter(pk=expired["id"]).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = enrol(expired["code"], "h1")
    assert response.status_code == 400 and locs(response) == ["code"] and "expired" in response.json()["error"]
    revoked = make_code(admin_client)
    assert admin_client.delete(f"/api/v1/enrolments/{revoked['id']}").status_code == 204
    response = enrol(revoked["code"], "h1")
    assert response.status_code == 400 and locs(response) == ["code"] and "revoked" in response.json()["error"]
    assert admin_client.delete("/api/v1/enrolments/99999").status_code == 404
    assert not Host.objects.exists()


@pytest.mark.parametrize("hostname", ["bad host", "a" * 64, "x;rm -rf /", ""])
def test_invalid_hostname_is_400_naming_hostname_and_keeps_the_code(admin_client, hostname):
    made = make_code(admin_client)
    response = enrol(made["code"], hostname)
    assert response.status_code == 400 and any(loc.endswith("hostname") for loc in locs(response))
    assert EnrolmentCode.objects.get(pk=made["id"]).uses_left == 1
    assert not Host.objects.exists()


def test_a_code_bound_to_another_host_is_400_naming_hostname(admin_client):
    made = make_code(admin_client, hostname="dgx-01")
    response = enrol(made["code"], "dgx-02")
    assert response.status_code == 400 and locs(response) == ["hostname"]
    assert enrol(made["code"], "dgx-01").status_code == 201


def test_a_host_with_an_active_token_is_409_unless_the_code_was_made_for_it(admin_client):
    old = host_token_issue(hostname="dgx-07", create_host=True)
    response = enrol(make_code(admin_client)["code"], "dgx-07")
    assert response.status_code == 409 and locs(response) == ["hostname"]
    assert "makes a code for this host name" in response.json()["error"]
    assert host_token_authenticate(old.token) is not None
    # A code made for that host replaces its token.
    response = enrol(make_code(admin_client, hostname="dgx-07")["code"], "dgx-07")
    assert response.status_code == 201
    assert host_token_authenticate(old.token) is None
    assert host_token_authenticate(response.json()["token"]).host.hostname == "dgx-07"


def test_a_code_for_any_host_refuses_every_existing_host_even_without_a_live_token(admin_client):
    # Revoked token, or none at all (a host an admin added by hand): the name is taken either way.
    revoked = host_token_issue(hostname="dgx-08", create_host=True)
    host_token_revoke(token=revoked.record)
    Host.objects.create(hostname="ws-hand-added")
    any_host = make_code(admin_client, uses=5)
    for hostname in ("dgx-08", "ws-hand-added"):
        response = enrol(any_host["code"], hostname)
        assert response.status_code == 409 and locs(response) == ["hostname"], response.content
        assert "already exists" in response.json()["error"]
    assert HostToken.objects.filter(revoked_at__isnull=True).count() == 0  # nothing written
    assert EnrolmentCode.objects.get(pk=any_host["id"]).uses_left == 5
    # A code made for that host name enrols it.
    response = enrol(make_code(admin_client, hostname="dgx-08")["code"], "dgx-08")
    assert response.status_code == 201
    assert host_token_authenticate(response.json()["token"]).host.hostname == "dgx-08"


def test_more_than_20_refusals_from_one_address_are_429_until_the_window_passes(admin_client):
    for _ in range(REFUSALS_MAX):
        assert enrol("gfe_guess", "h", address="10.9.9.9").status_code == 400
    good = make_code(admin_client)
    blocked = enrol(good["code"], "h-ok", address="10.9.9.9")
    assert blocked.status_code == 429 and "try again later" in blocked.json()["error"]
    assert enrol(good["code"], "h-other", address="10.9.9.10").status_code == 201  # other addresses are not
    EnrolmentAttempt.objects.filter(address="10.9.9.9").update(at=timezone.now() - dt.timedelta(minutes=11))
    good2 = make_code(admin_client)
    assert enrol(good2["code"], "h-ok", address="10.9.9.9").status_code == 201


def test_every_exchange_is_in_the_audit_trail(admin_client):
    made = make_code(admin_client)
    enrol(made["code"], "audited-1", address="10.1.1.1")
    enrol(made["code"], "audited-2", address="10.1.1.2")
    entries = LogEntry.objects.get_for_model(EnrolmentAttempt)
    reprs = sorted(entry.object_repr for entry in entries)
    assert reprs == ["audited-1 from 10.1.1.1: granted", "audited-2 from 10.1.1.2: refused"]
    assert LogEntry.objects.get_for_model(EnrolmentCode).filter(action=LogEntry.Action.CREATE).count() == 1


def test_in_openapi_with_every_status(client_for, viewer):
    paths = client_for(viewer).get("/api/v1/openapi.json").json()["paths"]
    assert {"201", "400", "409", "429"} <= set(paths["/api/v1/enrol"]["post"]["responses"])
    assert not paths["/api/v1/enrol"]["post"].get("security")
    assert {"201", "400", "401", "403"} <= set(paths["/api/v1/enrolments"]["post"]["responses"])
    assert {"204", "403", "404"} <= set(paths["/api/v1/enrolments/{code_id}"]["delete"]["responses"])


@pytest.mark.parametrize("allow_http", [True, False])
def test_install_command_asks_for_insecure_http_only_where_the_portal_takes_it(admin_client, settings, allow_http):
    settings.INGEST_ALLOW_HTTP = allow_http
    command = make_code(admin_client)["install_command"]
    assert command.endswith("--insecure-http") is allow_http
    secure = admin_client.post("/api/v1/enrolments", {}, content_type="application/json", secure=True).json()
    assert secure["install_command"].startswith(
        f"curl -fsSL https://testserver/agent/install.sh | GPU_FLEET_ENROL_CODE={secure['code']} "
        "sudo --preserve-env=GPU_FLEET_ENROL_CODE sh -s -- --url https://testserver"
    )
    assert "--code" not in secure["install_command"]  # the code is in no command line
    assert "--insecure-http" not in secure["install_command"]


def test_a_host_name_bound_to_another_live_code_is_400_naming_hostname(admin_client):
    reserved = make_code(admin_client, hostname="dgx-05")
    any_host = make_code(admin_client, uses=2)
    response = enrol(any_host["code"], "dgx-05")
    assert response.status_code == 400 and locs(response) == ["hostname"]
    assert "another enrolment code" in response.json()["error"]
    assert admin_client.delete(f"/api/v1/enrolments/{reserved['id']}").status_code == 204
    assert enrol(any_host["code"], "dgx-05").status_code == 201


def test_install_command_and_ingest_url_use_portal_url(admin_client, settings):
    """PORTAL_URL is the public base URL: the line pasted on a GPU host and the agent's ingest
    URL name it, whatever address the request came to (a node's own, behind nginx)."""
    settings.PORTAL_URL = "https://gpu-portal.lab.example"
    made = make_code(admin_client)
    public = "https://gpu-portal.lab.example"
    assert made["install_command"].startswith(f"curl -fsSL {public}/agent/install.sh | GPU_FLEET_ENROL_CODE=")
    assert f"sh -s -- --url {public}" in made["install_command"]
    assert "testserver" not in made["install_command"] and "--insecure-http" not in made["install_command"]
    enrolled = enrol(made["code"], "dgx-77")
    assert (
        enrolled.status_code == 201 and enrolled.json()["ingest_url"] == "https://gpu-portal.lab.example/api/v1/ingest"
    )


def test_install_command_carries_each_wheels_sha256(admin_client, settings, tmp_path, stand_in_pinned):
    import hashlib
    import shlex

    from portal.enrolment.agent_dist import agent_dist_prepare

    settings.AGENT_DIST_DIR = str(tmp_path / "dist")
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "nvidia_ml_py-13.615.71-py3-none-any.whl").write_bytes(stand_in_pinned)
    manifest = agent_dist_prepare()
    words = shlex.split(make_code(admin_client)["install_command"].split(" sh -s -- ", 1)[1])
    pairs = [words[i + 1] for i, word in enumerate(words) if word == "--sha256"]
    expected = {entry["name"]: hashlib.sha256((tmp_path / "dist" / entry["name"]).read_bytes()).hexdigest()
                for entry in manifest["files"]}  # fmt: skip
    assert len(expected) == 2 and dict(pair.split("=", 1) for pair in pairs) == expected


def test_openapi_servers_name_portal_url(admin_client, settings):
    assert (
        "servers" not in admin_client.get("/api/v1/openapi.json").json()
        or not (admin_client.get("/api/v1/openapi.json").json()["servers"])
    )
    settings.PORTAL_URL = "https://gpu-portal.lab.example"
    assert admin_client.get("/api/v1/openapi.json").json()["servers"] == [{"url": "https://gpu-portal.lab.example"}]
