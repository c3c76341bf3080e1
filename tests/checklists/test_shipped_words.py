"""The shipped checklists' words have one source, the migrations that ship them: every name,
description, label, help text and option the portal's own templates hold is translatable, and a
wording an admin typed stays as typed."""

import pytest
from django.utils import translation

from portal.checklists.models import ChecklistTemplate, TemplateItem
from portal.checklists.shipped import SHIPPED_OPTIONS, SHIPPED_TEXTS, shipped_text

pytestmark = pytest.mark.django_db


def test_every_word_of_the_shipped_templates_is_known():
    templates = list(ChecklistTemplate.objects.values_list("name", "description"))
    items = list(TemplateItem.objects.values_list("label", "help_text", "options"))
    assert len(templates) >= 6 and len(items) >= 40  # the migrations shipped them into the test database
    texts = {text for row in templates for text in row} | {text for label, help, _ in items for text in (label, help)}
    assert texts - {""} <= SHIPPED_TEXTS
    assert {option for *_, options in items for option in options} <= set(SHIPPED_OPTIONS)


def test_a_typed_wording_stays_as_typed():
    with translation.override("zh-hans"):
        assert shipped_text("Fans respond, checked by Li") == "Fans respond, checked by Li"
        assert shipped_text("") == ""
