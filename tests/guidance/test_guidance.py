"""The seed article's practices as guidance pages: one page per practice and an index,
in English and Simplified Chinese; every rule and every shipped checklist template belongs to a
practice, and the ticket and checklist pages link to it."""

import importlib
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone, translation

from portal.checklists import services as checklists
from portal.guidance.practices import BY_SLUG, CHECKLIST_PRACTICE, PRACTICES, RULE_PRACTICE
from portal.maintenance.rules import RULES
from portal.maintenance.services.tickets import ticket_fire
from tests.factories import GpuFactory

COMPILED = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.mo"
SHIPPED = importlib.import_module("portal.checklists.migrations.0002_shipped_templates").TEMPLATES
LANGUAGES = ["en", "zh-hans"]


def test_every_rule_belongs_to_a_practice():
    missing = sorted(set(RULES) - set(RULE_PRACTICE))
    assert not missing, f"rules without a practice in portal/guidance/practices.py RULE_PRACTICE: {missing}"
    assert not set(RULE_PRACTICE) - set(RULES), "RULE_PRACTICE names rules that do not exist"
    assert set(RULE_PRACTICE.values()) <= set(BY_SLUG)


def test_every_shipped_checklist_template_belongs_to_a_practice():
    shipped = {spec["key"] for spec in SHIPPED}
    missing = sorted(shipped - set(CHECKLIST_PRACTICE))
    assert not missing, f"shipped checklist templates without a practice (CHECKLIST_PRACTICE): {missing}"
    assert set(CHECKLIST_PRACTICE) <= shipped
    assert set(CHECKLIST_PRACTICE.values()) <= set(BY_SLUG)


def test_every_practice_drives_a_rule_or_a_checklist():
    driven = set(RULE_PRACTICE.values()) | set(CHECKLIST_PRACTICE.values())
    assert {p.slug for p in PRACTICES} == driven


def _expected_title(practice, language):
    with translation.override(language):
        title = str(practice.title)
    with translation.override("en"):
        english = str(practice.title)
    if language != "en" and COMPILED.exists():  # `make messages` compiled the catalogue: Chinese it is
        assert title != english, f"{practice.slug}: the title has no {language} translation"
    return title


@pytest.mark.django_db
@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("slug", [p.slug for p in PRACTICES])
def test_practice_page_renders(client_for, viewer, slug, language, django_assert_max_num_queries):
    client = client_for(viewer)
    with django_assert_max_num_queries(12):
        response = client.get(f"/guide/{slug}/", HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    assert response.headers["Content-Language"] == language
    html = response.content.decode()
    assert f'<html lang="{language}">' in html
    assert _expected_title(BY_SLUG[slug], language) in html
    # The rules behind the practice, with the settings in force.
    for rule, practice in RULE_PRACTICE.items():
        if practice == slug:
            assert f"<code>{rule}</code>" in html


@pytest.mark.django_db
@pytest.mark.parametrize("language", LANGUAGES)
def test_index_lists_every_practice(client_for, viewer, language):
    response = client_for(viewer).get("/guide/", HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    html = response.content.decode()
    for practice in PRACTICES:
        assert reverse("guidance:practice", args=[practice.slug]) in html
        assert _expected_title(practice, language) in html


@pytest.mark.django_db
def test_unknown_practice_is_404(client_for, viewer):
    assert client_for(viewer).get("/guide/no-such-practice/").status_code == 404


@pytest.mark.django_db
def test_guidance_needs_a_signed_in_user(client_for):
    response = client_for(None).get("/guide/")
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.django_db
@pytest.mark.parametrize(("rule", "slug"), [("overheat", "dust-and-airflow"), ("overclock", "overclocking")])
def test_ticket_page_links_to_its_guidance(client_for, viewer, rule, slug):
    gpu = GpuFactory()
    ticket, _ = ticket_fire(rule=rule, host_id=gpu.host_id, gpu_id=gpu.pk, at=timezone.now(), value=90)
    html = client_for(viewer).get(ticket.get_absolute_url()).content.decode()
    assert f'href="/guide/{slug}/"' in html
    assert f"Guidance: {BY_SLUG[slug].title}" in html


@pytest.mark.django_db
def test_checklist_run_page_links_to_its_guidance(client_for, technician):
    gpu = GpuFactory()
    run = checklists.run_start(template_key="backup_verification", hostname=gpu.host.hostname, gpu_uuids=None,
                               user=technician)  # fmt: skip
    html = client_for(technician).get(run.get_absolute_url()).content.decode()
    assert 'href="/guide/backups/"' in html
