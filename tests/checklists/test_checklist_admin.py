"""Admins edit templates in the portal; every save is a new version; runs keep theirs."""

import pytest

from portal.checklists.models import ChecklistTemplate

pytestmark = pytest.mark.django_db


def formset(template, **changes):
    data = {"key": template.key, "name": template.name, "description": template.description,
            "record_kind": template.record_kind, "applies_to": template.applies_to, "active": "on"}  # fmt: skip
    items = list(template.items.order_by("position"))
    prefix = "items"
    data.update({f"{prefix}-TOTAL_FORMS": len(items), f"{prefix}-INITIAL_FORMS": len(items),
                 f"{prefix}-MIN_NUM_FORMS": 0, f"{prefix}-MAX_NUM_FORMS": 1000})  # fmt: skip
    for n, item in enumerate(items):
        row = {"id": item.pk, "template": template.pk, "position": item.position, "key": item.key, "kind": item.kind,
               "label": item.label, "help_text": item.help_text, "unit": item.unit,
               "min_value": "" if item.min_value is None else item.min_value,
               "max_value": "" if item.max_value is None else item.max_value,
               "options": __import__("json").dumps(item.options), "record_field": item.record_field,
               "auto_check": item.auto_check, "params": __import__("json").dumps(item.params)}  # fmt: skip
        if item.required:
            row["required"] = "on"
        row.update(changes.get(item.key, {}))
        data.update({f"{prefix}-{n}-{k}": v for k, v in row.items()})
    return data


def test_admin_edits_items_and_bumps_the_version(client_for, admin):
    template = ChecklistTemplate.objects.get(key="cleaning")
    url = f"/admin/checklists/checklisttemplate/{template.pk}/change/"
    client = client_for(admin)
    assert client.get(url).status_code == 200
    response = client.post(url, formset(template, filters={"label": "Filters replaced"}))
    assert response.status_code == 302, response.content.decode()[:3000]
    template.refresh_from_db()
    assert template.version == 2
    assert template.items.get(key="filters").label == "Filters replaced"


def test_admin_bad_item_is_refused(client_for, admin):
    template = ChecklistTemplate.objects.get(key="cleaning")
    url = f"/admin/checklists/checklisttemplate/{template.pk}/change/"
    response = client_for(admin).post(url, formset(template, dust_level={"options": "[]"}))
    assert response.status_code == 200 and b"A choice needs a list of options" in response.content
    response = client_for(admin).post(url, formset(template, filters={"record_field": "vendor"}))
    assert response.status_code == 200 and b"has no field" in response.content
    template.refresh_from_db()
    assert template.version == 1


def test_only_admins(client_for, technician):
    assert client_for(technician).get("/admin/checklists/checklisttemplate/").status_code in (302, 403)
