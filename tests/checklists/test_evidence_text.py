"""The automatic checks' sentences shown in the reader's language: in English exactly as stored
(the API's text), and anything autochecks did not write left as it is."""

import pytest
from django.utils import translation

from portal.checklists.evidence_text import evidence_text

STORED = [
    "idle median ≤ 41.5 °C (limit 45 °C) over the last 30 min",
    "no idle readings (utilization ≤ 5 %) in the last 30 min",
    "no uncorrected ECC error and no pending remap in the last 60 min",
    "uncorrected ECC errors or pending remaps on GPU 0, GPU 3",
    "no ECC figures reported",
    "fans spin and follow the temperature (last 30 min)",
    "fans stopped or not following the temperature on GPU 1",
    "no fan speed reported",
    "last backup 2026-12-01 03:00 UTC (verified); needed within 7 days",
    "last backup 2026-12-01 03:00 UTC (not verified); needed within 7 days",
    "no backup record on this host; needed within 7 days",
    "verification pending: waiting for loaded readings after the cleaning",
    "not enough loaded readings to compare at equal power",
    "3.5 °C cooler or more at equal power (needed ≥ 3 °C)",
    "only 1.2 °C cooler at equal power (needed ≥ 3 °C)",
    "no loaded readings before the cleaning",
    "12 of 60 loaded readings after the cleaning",
    "0 of 60 loaded readings after the cleaning; none yet at a power seen before",
]


@pytest.mark.parametrize("text", STORED)
def test_english_is_the_stored_sentence(text):
    with translation.override("en"):
        assert evidence_text(text) == text


def test_other_text_is_left_as_it_is():
    with translation.override("zh-hans"):
        assert evidence_text("a note somebody wrote (50 %)") == "a note somebody wrote (50 %)"
        assert evidence_text("") == "" and evidence_text(None) is None
