"""The three roles are groups whose permissions are synced after every migrate."""

import pytest
from django.contrib.auth.models import Group

from portal.accounts.roles import ROLES, role_flags
from portal.accounts.services import role_permissions_sync, user_set_role
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def permissions(role):
    group = Group.objects.get(name=role)
    return {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}


def test_roles_exist_after_migrate():
    assert set(Group.objects.filter(name__in=ROLES).values_list("name", flat=True)) == set(ROLES)


def test_admin_has_every_fleet_permission():
    granted = permissions("admin")
    for model in ("host", "gpu", "maintenancerecord", "attachment"):
        for action in ("add", "change", "delete", "view"):
            assert f"fleet.{action}_{model}" in granted
    assert "auditlog.view_logentry" in granted
    assert "auditlog.delete_logentry" not in granted


def test_technician_adds_and_edits_records_only():
    granted = permissions("technician")
    assert {"fleet.add_maintenancerecord", "fleet.change_maintenancerecord", "fleet.add_attachment"} <= granted
    assert {"fleet.view_host", "fleet.view_gpu", "auditlog.view_logentry"} <= granted
    assert (
        not {
            "fleet.delete_maintenancerecord",
            "fleet.add_host",
            "fleet.change_host",
            "fleet.delete_host",
            "fleet.add_gpu",
            "fleet.change_gpu",
            "fleet.delete_gpu",
        }
        & granted
    )


def test_viewer_only_views():
    granted = permissions("viewer")
    assert granted
    assert all(p.split(".", 1)[1].startswith("view_") for p in granted), granted


def test_sync_is_idempotent_and_repairs_drift():
    before = {role: permissions(role) for role in ROLES}
    Group.objects.get(name="viewer").permissions.clear()
    role_permissions_sync()
    role_permissions_sync()
    assert {role: permissions(role) for role in ROLES} == before


def test_user_set_role_replaces_the_previous_role():
    user = UserFactory(role="viewer")
    user_set_role(user=user, role="technician")
    assert list(user.groups.values_list("name", flat=True)) == ["technician"]
    with pytest.raises(ValueError, match="Unknown role"):
        user_set_role(user=user, role="root")


def test_role_flags(actors):
    assert role_flags(actors["admin"]) == {"admin": True, "technician": True}
    assert role_flags(actors["technician"]) == {"admin": False, "technician": True}
    assert role_flags(actors["viewer"]) == {"admin": False, "technician": False}
    assert role_flags(actors["outsider"]) == {"admin": False, "technician": False}
