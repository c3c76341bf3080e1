"""Sign-ins, refusals and role changes in the audit trail with their source, and each user's
source in the admin."""

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import Group
from django.test import Client

from portal.accounts.directory.services import directory_user_accept
from portal.accounts.models import AccountEvent, Source
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_local_sign_ins_and_refusals_are_in_the_audit_trail(client_for, admin):
    local = UserFactory(username="lena")
    local.set_password("lena-pass-9")
    local.save()
    assert Client().post("/login/", {"username": "lena", "password": "nope"}).status_code == 200
    assert Client().post("/login/", {"username": "lena", "password": "lena-pass-9"}).status_code == 302
    events = list(AccountEvent.objects.order_by("id").values_list("kind", "source", "username", "reason"))
    assert events == [("refused", "local", "lena", "credentials"), ("sign_in", "local", "lena", "")]

    page = client_for(admin).get("/audit/", {"model": "account"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "sign-in: lena (local)" in html and "refused sign-in: lena (local)" in html
    assert "credentials" in html


def test_a_role_change_names_its_source_in_the_audit_trail(client_for, admin):
    user = UserFactory(username="dir-user")
    directory_user_accept(user=user, source=Source.LDAP, directory_id="uid=dir-user,dc=x", role="technician")
    directory_user_accept(user=user, source=Source.LDAP, directory_id="uid=dir-user,dc=x", role="admin")
    html = client_for(admin).get("/audit/", {"model": "account", "actor": "dir-user"}).content.decode()
    assert html.count("role change: dir-user (ldap)") == 2
    assert "technician" in html and "admin" in html


def test_a_typed_user_name_is_data_on_the_audit_page(client_for, admin):
    Client().post("/login/", {"username": "<script>alert(1)</script>", "password": "x"})
    html = client_for(admin).get("/audit/", {"model": "account"}).content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


def test_the_admin_lists_each_users_source(client_for, admin):
    ldap_user = UserFactory(username="from-ldap")
    directory_user_accept(user=ldap_user, source=Source.LDAP, directory_id="uid=from-ldap,dc=x", role="viewer")
    page = client_for(admin).get("/admin/auth/user/")
    html = page.content.decode()
    assert page.status_code == 200
    row = html[html.index("from-ldap") :]
    assert "LDAP" in row[: row.index("</tr>")]
    alice_row = html[html.index(f'/admin/auth/user/{admin.pk}/change/">alice<') :]
    assert "local" in alice_row[: alice_row.index("</tr>")]
    assert client_for(admin).get("/admin/auth/user/", {"profile__source__exact": "ldap"}).status_code == 200
    change = client_for(admin).get(f"/admin/auth/user/{ldap_user.pk}/change/").content.decode()
    assert "uid=from-ldap,dc=x" in change


def test_the_admin_lists_users_in_a_constant_number_of_queries(client_for, admin, django_assert_max_num_queries):
    client = client_for(admin)
    for n in range(5):
        UserFactory(username=f"u{n}")
    with django_assert_max_num_queries(12):
        assert client.get("/admin/auth/user/").status_code == 200


def test_a_local_promotion_in_the_admin_site_is_in_the_audit_trail_as_local(
    client_for, admin, viewer, django_capture_on_commit_callbacks
):
    client = client_for(admin)
    change = client.get(f"/admin/auth/user/{viewer.pk}/change/")
    form = change.context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and name != "password"}
    technician_group = Group.objects.get(name="technician")
    data.update({"groups": [technician_group.pk], "date_joined_0": "2026-01-01",
                 "date_joined_1": "00:00:00", "user_permissions": []})  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(f"/admin/auth/user/{viewer.pk}/change/", data)
    assert answer.status_code == 302, answer.content.decode()[:2000]
    event = AccountEvent.objects.get(kind="role_change")
    assert (event.source, event.role_before, event.role_after, event.user) == ("local", "viewer", "technician", viewer)
    entry = LogEntry.objects.get(object_pk=str(event.pk), content_type__model="accountevent")
    assert entry.actor == admin  # credited to the admin who did it


def test_the_directory_s_own_changes_are_recorded_once(django_capture_on_commit_callbacks):
    user = UserFactory(username="dir-once")
    with django_capture_on_commit_callbacks(execute=True):
        directory_user_accept(user=user, source=Source.OIDC, directory_id="iss|dir-once", role="viewer")
        directory_user_accept(user=user, source=Source.OIDC, directory_id="iss|dir-once", role="admin")
    changes = list(AccountEvent.objects.order_by("id").values_list("source", "role_before", "role_after"))
    assert changes == [("oidc", "", "viewer"), ("oidc", "viewer", "admin")]


def test_the_admin_cannot_give_a_directory_account_a_password(client_for, admin):
    user = UserFactory(username="dir-pw")
    directory_user_accept(user=user, source=Source.LDAP, directory_id="uid=dir-pw,dc=x", role="viewer")
    client = client_for(admin)
    url = f"/admin/auth/user/{user.pk}/password/"
    answer = client.post(url, {"password1": "A-new-pass-123", "password2": "A-new-pass-123", "usable_password": "true"})
    assert answer.status_code == 302 and answer["Location"] == f"/admin/auth/user/{user.pk}/change/"
    user.refresh_from_db()
    assert not user.has_usable_password()
    assert Client().post("/login/", {"username": "dir-pw", "password": "A-new-pass-123"}).status_code == 200
    assert client.get(url).status_code == 302
    # A local account's password is still the admin's to set.
    assert client.get(f"/admin/auth/user/{admin.pk}/password/").status_code == 200
