"""The "Add hosts" page: admins only; it shows the one line to paste, with this portal's URL."""

import pytest

from portal.enrolment.models import EnrolmentCode

pytestmark = pytest.mark.django_db

URL = "/add-hosts/"


def test_admin_makes_a_code_and_sees_the_line_to_paste(admin, client_for):
    client = client_for(admin)
    page = client.get(URL)
    assert page.status_code == 200 and b"Add hosts" in page.content
    response = client.post(URL, {"hostname": "dgx-09", "uses": 1, "expires_in_hours": 24})
    assert response.status_code == 201
    command = response.context["command"]
    code = response.context["issued"].code
    assert command.startswith(
        f"curl -fsSL http://testserver/agent/install.sh | GPU_FLEET_ENROL_CODE={code} "
        "sudo --preserve-env=GPU_FLEET_ENROL_CODE sh -s -- --url http://testserver"
    )
    assert command.encode() in response.content
    assert EnrolmentCode.objects.get().hostname == "dgx-09"
    # The list shows codes by prefix only, never the secret.
    listing = client.get(URL)
    assert response.context["issued"].code.encode() not in listing.content and b"dgx-09" in listing.content


def test_the_nav_links_the_page_for_admins_only(admin, viewer, client_for):
    assert b'href="/add-hosts/"' in client_for(admin).get("/").content
    assert b'href="/add-hosts/"' not in client_for(viewer).get("/").content


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"hostname": "<script>x</script>", "uses": 1, "expires_in_hours": 24}, "hostname"),
        ({"hostname": "", "uses": 0, "expires_in_hours": 24}, "uses"),
        ({"hostname": "", "uses": 1, "expires_in_hours": 9999}, "expires_in_hours"),
    ],
)
def test_bad_input_is_shown_beside_the_field_and_makes_nothing(admin, client_for, data, field):
    response = client_for(admin).post(URL, data)
    assert response.status_code == 400
    assert response.context["form"].errors[field]
    assert b"<script>x</script>" not in response.content
    assert EnrolmentCode.objects.count() == 0


@pytest.mark.parametrize("role", ["technician", "viewer", "outsider"])
def test_others_get_403(actors, client_for, role, admin):
    client = client_for(actors[role])
    assert client.get(URL).status_code == 403
    assert client.post(URL, {"uses": 1, "expires_in_hours": 1}).status_code == 403
    code = EnrolmentCode.objects.create(prefix="gfe_x", secret_hash="h", expires_at="2030-01-01T00:00Z", uses_left=1)
    assert client.post(f"{URL}codes/{code.pk}/revoke/").status_code == 403
    code.refresh_from_db()
    assert code.revoked_at is None


def test_admin_revokes_a_code(admin, client_for):
    code = EnrolmentCode.objects.create(prefix="gfe_x", secret_hash="h", expires_at="2030-01-01T00:00Z", uses_left=1)
    response = client_for(admin).post(f"{URL}codes/{code.pk}/revoke/")
    assert response.status_code == 302
    code.refresh_from_db()
    assert code.revoked_at is not None
