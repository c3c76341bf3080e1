"""The audit log names a checklist answer by its item's label and the answer's label (issue 48),
never by the item's key and the stored JSON ("fans_spin = 'fail'")."""

import re

import pytest

from portal.checklists import services
from tests.checklists.test_checklist_pages import make_run

pytestmark = pytest.mark.django_db


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_audit_log_names_an_answer_by_its_labels(client_for, technician, admin, host):
    run = make_run(host, technician)
    services.run_answer(run=run, answers=[{"item": "fans_spin", "value": "fail"}, {"item": "filters", "value": True}],
                        user=technician)  # fmt: skip
    page = _text(client_for(admin).get("/audit/").content.decode())
    assert "Fans spin freely (no grinding, wobble or stiff bearing): fail" in page
    assert "Dust filters cleaned or replaced: yes" in page
    assert "fans_spin" not in page and "'fail'" not in page and "&quot;fail&quot;" not in page
    assert "Value : fail" in page
