"""Every page, logged in as admin and logged out, passes axe-core's WCAG 2.1 A/AA rules
(tags wcag2a, wcag2aa, wcag21a, wcag21aa). axe-core comes from package.json (`make axe`)."""

import pytest

from tests.browser.site_walk import AXE, WCAG_TAGS
from tests.portal_process import in_ci

pytestmark = pytest.mark.browser


def test_every_page_passes_axe_wcag21_aa(request):
    if not AXE.exists():
        message = f"{AXE} is missing: run `make axe` (npm ci) to run the accessibility test"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    site_walk = request.getfixturevalue("site_walk")  # after the check: no walk just to skip
    assert {v.logged_in for v in site_walk} == {True, False}
    problems = {
        visit.label: [f"{v['id']} ({v['impact']}): {v['help']}: {v['nodes']}" for v in visit.axe]
        for visit in site_walk
        if visit.axe
    }
    assert not problems, f"axe-core ({', '.join(WCAG_TAGS)}) found: {problems}"
