"""The automatic checks' sentences (portal.checklists.autochecks) in the reader's language.

An automatic item's evidence is stored with its summary in English (the API returns it as it
is); the run page shows it translated when it is one of the sentences autochecks writes, and as
stored otherwise. Each pattern here matches one sentence of autochecks, its msgid the same
sentence with placeholders, so English shows exactly what was stored.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop, pgettext

from portal.core.stored_text import StoredSentences

_NUMBER = r"[-+0-9.,e]+"
SENTENCES = [
    (rf"idle median ≤ (?P<c>{_NUMBER}) °C \(limit (?P<limit>{_NUMBER}) °C\) over the last (?P<min>{_NUMBER}) min",
     gettext_noop("idle median ≤ %(c)s °C (limit %(limit)s °C) over the last %(min)s min")),
    (rf"no idle readings \(utilization ≤ (?P<util>{_NUMBER}) %\) in the last (?P<min>{_NUMBER}) min",
     gettext_noop("no idle readings (utilization ≤ %(util)s %%) in the last %(min)s min")),
    (rf"no uncorrected ECC error and no pending remap in the last (?P<min>{_NUMBER}) min",
     gettext_noop("no uncorrected ECC error and no pending remap in the last %(min)s min")),
    (r"uncorrected ECC errors or pending remaps on (?P<gpus>.+)",
     gettext_noop("uncorrected ECC errors or pending remaps on %(gpus)s")),
    (r"no ECC figures reported", gettext_noop("no ECC figures reported")),
    (rf"fans spin and follow the temperature \(last (?P<min>{_NUMBER}) min\)",
     gettext_noop("fans spin and follow the temperature (last %(min)s min)")),
    (r"fans stopped or not following the temperature on (?P<gpus>.+)",
     gettext_noop("fans stopped or not following the temperature on %(gpus)s")),
    (r"no fan speed reported", gettext_noop("no fan speed reported")),
    (r"last backup (?P<at>[0-9: -]+) UTC \(verified\); needed within (?P<days>\d+) days",
     gettext_noop("last backup %(at)s UTC (verified); needed within %(days)s days")),
    (r"last backup (?P<at>[0-9: -]+) UTC \(not verified\); needed within (?P<days>\d+) days",
     gettext_noop("last backup %(at)s UTC (not verified); needed within %(days)s days")),
    (r"no backup record on this host; needed within (?P<days>\d+) days",
     gettext_noop("no backup record on this host; needed within %(days)s days")),
    (r"verification pending: waiting for loaded readings after the cleaning",
     gettext_noop("verification pending: waiting for loaded readings after the cleaning")),
    (r"not enough loaded readings to compare at equal power",
     gettext_noop("not enough loaded readings to compare at equal power")),
    (rf"(?P<c>{_NUMBER}) °C cooler or more at equal power \(needed ≥ (?P<need>{_NUMBER}) °C\)",
     gettext_noop("%(c)s °C cooler or more at equal power (needed ≥ %(need)s °C)")),
    (rf"only (?P<c>{_NUMBER}) °C cooler at equal power \(needed ≥ (?P<need>{_NUMBER}) °C\)",
     gettext_noop("only %(c)s °C cooler at equal power (needed ≥ %(need)s °C)")),
    (r"no loaded readings before the cleaning", gettext_noop("no loaded readings before the cleaning")),
    (r"(?P<n>\d+) of (?P<need>\d+) loaded readings after the cleaning; none yet at a power seen before",
     gettext_noop("%(n)s of %(need)s loaded readings after the cleaning; none yet at a power seen before")),
    (r"(?P<n>\d+) of (?P<need>\d+) loaded readings after the cleaning",
     gettext_noop("%(n)s of %(need)s loaded readings after the cleaning")),
]  # fmt: skip
_STORED = StoredSentences(SENTENCES)


def evidence_text(text: str) -> str:
    """An automatic check's summary or per-GPU reason in the active language, when autochecks wrote it."""
    if not isinstance(text, str) or not text:
        return text
    shown = _STORED.shown(text)
    return text if shown is None else shown


def outcome_word(outcome: str) -> str:
    """An automatic item's outcome (pass, fail, unknown, pending) as the pages show it."""
    words = {
        "pass": pgettext("checklist outcome", "pass"),
        "fail": pgettext("checklist outcome", "fail"),
        "unknown": pgettext("checklist outcome", "unknown"),
        "pending": pgettext("checklist outcome", "pending"),
    }
    return words.get(outcome, outcome)
