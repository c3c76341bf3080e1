"""Ingest sources: the API, the command, the admin and the page; the host page says who feeds it."""

import io

import pytest
from django.core.management import CommandError, call_command

from portal.core.tokens import secret_hash
from portal.fleet.models import Host
from portal.remote_write.models import IngestSource
from portal.remote_write.services.sources import ingest_source_issue
from tests.remote_write.helpers import FULL, HOSTNAME, UUID_B, body, now_ms, post, sample_series

pytestmark = pytest.mark.django_db
JSON = "application/json"


def test_admin_creates_a_source_and_sees_its_token_once(admin, client_for):
    client = client_for(admin)
    answer = client.post("/api/v1/ingest-sources", {"name": "lab", "hosts": "gpu-*"}, content_type="application/json")
    assert answer.status_code == 201
    created = answer.json()
    assert created.keys() == {"id", "name", "hosts", "token"} and created["token"].startswith("gfs_")
    record = IngestSource.objects.get()
    assert record.secret_hash == secret_hash(created["token"]) and created["token"] not in str(record.__dict__)
    listed = client.get("/api/v1/ingest-sources").json()
    assert listed == [{"id": record.pk, "name": "lab", "hosts": "gpu-*", "last_write_at": None, "samples_stored": 0,
                       "samples_skipped": 0, "samples_dropped": 0}]  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"name": "", "hosts": "*"}, "name"), ({"name": "x", "hosts": "gpu-$(id)"}, "hosts"), ({"name": "x"}, "hosts")],
)
def test_bad_source_is_400_naming_the_field(admin, client_for, payload, field):
    answer = client_for(admin).post("/api/v1/ingest-sources", payload, content_type="application/json")
    assert answer.status_code in (400, 422)
    assert field in str(answer.json())
    assert not IngestSource.objects.exists()


def test_a_second_source_of_the_same_name_is_409(admin, client_for):
    ingest_source_issue(name="lab", hosts="*")
    answer = client_for(admin).post(
        "/api/v1/ingest-sources", {"name": "lab", "hosts": "*"}, content_type="application/json"
    )
    assert answer.status_code == 409


@pytest.mark.parametrize("role", ["technician", "viewer", "outsider"])
def test_only_admins_see_or_make_sources(actors, client_for, role):
    client = client_for(actors[role])
    assert client.get("/api/v1/ingest-sources").status_code == 403
    assert (
        client.post("/api/v1/ingest-sources", {"name": "x", "hosts": "*"}, content_type="application/json").status_code
        == 403
    )
    assert client.get("/ingest-sources/").status_code == 403
    assert client_for(None).get("/api/v1/ingest-sources").status_code == 401


def test_revoked_source_is_refused_and_gone_from_the_list(admin, client_for, source):
    client = client_for(admin)
    assert client.delete(f"/api/v1/ingest-sources/{source.record.pk}").status_code == 204
    assert client.delete(f"/api/v1/ingest-sources/{source.record.pk}").status_code == 404
    assert post(source.client, source.token, body(sample_series(FULL, now_ms()))).status_code == 401
    assert client.get("/api/v1/ingest-sources").json() == []


def test_list_shows_last_write_and_counts(admin, client_for, source):
    elsewhere = sample_series(FULL, now_ms(-30), hostname="dgx-1", uuid=UUID_B)  # outside prom-*
    post(source.client, source.token, body(sample_series(FULL, now_ms(-30)) + elsewhere))
    (listed,) = client_for(admin).get("/api/v1/ingest-sources").json()
    assert (listed["samples_stored"], listed["samples_dropped"]) == (len(FULL), len(FULL))
    assert listed["last_write_at"] is not None and "token" not in listed
    page = client_for(admin).get("/ingest-sources/").content.decode()
    assert "(just now)" in page and "0\xa0minutes" not in page  # written seconds ago


def test_issue_source_token_command_prints_the_token_once():
    out, err = io.StringIO(), io.StringIO()
    call_command("issue_source_token", "lab", "--hosts", "dgx-*", stdout=out, stderr=err)
    token = out.getvalue().strip()
    assert IngestSource.objects.get(secret_hash=secret_hash(token)).hosts == "dgx-*"
    assert "shown once" in err.getvalue()
    with pytest.raises(CommandError, match="hosts"):
        call_command("issue_source_token", "other", "--hosts", "a b", stdout=out, stderr=err)


def test_sources_page_makes_a_source_and_shows_the_remote_write_block(admin, client_for, source):
    client = client_for(admin)
    page = client.get("/ingest-sources/")
    assert page.status_code == 200 and b"lab-prometheus" in page.content
    made = client.post("/ingest-sources/", {"name": "<b>lab2</b>", "hosts": "gpu-*"})
    assert made.status_code == 201
    token = IngestSource.objects.get(name="<b>lab2</b>")
    assert b"/api/v1/prometheus/write" in made.content and b"DCGM_FI_.*" in made.content
    assert b"&lt;b&gt;lab2&lt;/b&gt;" in made.content and b"<b>lab2</b>" not in made.content
    assert client.post("/ingest-sources/", {"name": "", "hosts": "gpu-*"}).status_code == 400
    revoked = client.post(f"/ingest-sources/{token.pk}/revoke/")
    assert revoked.status_code == 302
    assert IngestSource.objects.get(pk=token.pk).revoked_at is not None


def test_admin_site_makes_a_source_with_its_token_shown_once(admin, client_for):
    client = client_for(admin)
    answer = client.post("/admin/remote_write/ingestsource/add/", {"name": "lab", "hosts": "*"}, follow=True)
    assert answer.status_code == 200
    shown = [str(message) for message in answer.context["messages"]]
    assert any("gfs_" in message for message in shown)
    token = next(m for m in shown if "gfs_" in m).rsplit(" ", 1)[-1]
    assert IngestSource.objects.get().secret_hash == secret_hash(token)


def test_a_host_fed_by_a_source_says_so_on_its_page(admin, client_for, source):
    post(source.client, source.token, body(sample_series(FULL, now_ms(-30))))
    page = client_for(admin).get(f"/hosts/{HOSTNAME}/")
    assert page.status_code == 200
    assert b'id="fed-by-source"' in page.content and b"lab-prometheus" in page.content
    other = Host.objects.create(hostname="agent-host")
    assert b'id="fed-by-source"' not in client_for(admin).get(f"/hosts/{other.hostname}/").content
