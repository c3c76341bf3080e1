"""What the automatic checks (portal.checklists.autochecks) say, as messages (see
portal.core.messages): an automatic answer stores its evidence's English summary and per-GPU
reasons (what the API returns) and these messages beside them (`ChecklistAnswer.evidence_msgs`);
the run's page renders them in the reader's language."""

from __future__ import annotations

from django.utils.translation import gettext_noop, pgettext

from portal.core import messages
from portal.core.messages import message

IDLE_OK = message(
    "checklists.idle.ok", gettext_noop("idle median ≤ %(c)s °C (limit %(limit)s °C) over the last %(min)s min")
)
IDLE_NONE = message(
    "checklists.idle.none", gettext_noop("no idle readings (utilization ≤ %(util)s %%) in the last %(min)s min")
)
ECC_OK = message(
    "checklists.ecc.ok", gettext_noop("no uncorrected ECC error and no pending remap in the last %(min)s min")
)
ECC_BAD = message("checklists.ecc.bad", gettext_noop("uncorrected ECC errors or pending remaps on %(gpus)s"))
ECC_NONE = message("checklists.ecc.none", gettext_noop("no ECC figures reported"))
FANS_OK = message("checklists.fans.ok", gettext_noop("fans spin and follow the temperature (last %(min)s min)"))
FANS_BAD = message("checklists.fans.bad", gettext_noop("fans stopped or not following the temperature on %(gpus)s"))
FANS_NONE = message("checklists.fans.none", gettext_noop("no fan speed reported"))
BACKUP_VERIFIED = message(
    "checklists.backup.verified", gettext_noop("last backup %(at)s UTC (verified); needed within %(days)s days")
)
BACKUP_UNVERIFIED = message(
    "checklists.backup.unverified", gettext_noop("last backup %(at)s UTC (not verified); needed within %(days)s days")
)
BACKUP_NONE = message(
    "checklists.backup.none", gettext_noop("no backup record on this host; needed within %(days)s days")
)
CLEANING_PENDING = message(
    "checklists.cleaning.pending", gettext_noop("verification pending: waiting for loaded readings after the cleaning")
)
CLEANING_UNKNOWN = message(
    "checklists.cleaning.unknown", gettext_noop("not enough loaded readings to compare at equal power")
)
CLEANING_PASS = message(
    "checklists.cleaning.pass", gettext_noop("%(c)s °C cooler or more at equal power (needed ≥ %(need)s °C)")
)
CLEANING_FAIL = message(
    "checklists.cleaning.fail", gettext_noop("only %(c)s °C cooler at equal power (needed ≥ %(need)s °C)")
)
CLEANING_NO_BEFORE = message("checklists.cleaning.no_before", gettext_noop("no loaded readings before the cleaning"))
CLEANING_AFTER = message(
    "checklists.cleaning.after", gettext_noop("%(n)s of %(need)s loaded readings after the cleaning")
)
CLEANING_AFTER_NO_POWER = message(
    "checklists.cleaning.after_no_power",
    gettext_noop("%(n)s of %(need)s loaded readings after the cleaning; none yet at a power seen before"),
)
DIAGNOSTIC_PASS = message(
    "checklists.diagnostic.pass", gettext_noop("a diagnostic passed on every GPU after the repair")
)
DIAGNOSTIC_FAIL = message("checklists.diagnostic.fail", gettext_noop("a diagnostic failed after the repair"))
DIAGNOSTIC_PENDING = message("checklists.diagnostic.pending", gettext_noop("waiting for the diagnostic"))
DIAGNOSTIC_UNKNOWN = message(
    "checklists.diagnostic.unknown", gettext_noop("no passing diagnostic after the repair (expired, or another driver)")
)
UNKNOWN_CHECK = message("checklists.unknown_check", gettext_noop("unknown check"))  # fmt: skip


def evidence_shown(evidence: dict | None, msgs: dict | None) -> tuple[str, list[dict]]:
    """An automatic answer's summary and its per-GPU rows (each `why` in words) in the active
    language, from the messages stored beside the evidence; the stored English where there are none."""
    evidence, msgs = evidence or {}, msgs or {}
    summary = messages.shown(msgs.get("summary"), evidence.get("summary", ""))
    why = msgs.get("why") or {}
    rows = [
        {**row, "why": messages.shown(why.get(row.get("uuid", "")), row["why"])} if row.get("why") else row
        for row in evidence.get("gpus") or []
    ]
    return summary, rows


def outcome_word(outcome: str) -> str:
    """An automatic item's outcome (pass, fail, unknown, pending) as the pages show it."""
    words = {
        "pass": pgettext("checklist outcome", "pass"),
        "fail": pgettext("checklist outcome", "fail"),
        "unknown": pgettext("checklist outcome", "unknown"),
        "pending": pgettext("checklist outcome", "pending"),
    }
    return words.get(outcome, outcome)
