"""The failure categories: the one table that says which tickets are failures, and of which kind.

Every page and file that names a failure's kind reads it from here: the ticket page ("counted in
the reliability report as …"), the reliability report's rates by category and its lemons and
repeat offenders, the RMA pack's XID timeline and hardware tickets, and the CSV/PDF exports.

A ticket of a rule in RULE_CATEGORY is a failure of that category, except an XID ticket whose
codes are none of them a hardware fault in NVIDIA's catalog (a firmware or application code: the
XID class the rule engine filed it under still says which category it would be). The XID classes
of the rule engine (rules/xid.py) map to categories through XID_CLASS_CATEGORY, so an XID code's
category is the same whether one looks at the code, its rule or its ticket.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.utils.translation import gettext, gettext_noop

from portal.maintenance.rules.xid import XID_CLASSES, xid_class
from portal.maintenance.xid_catalog import (
    APPLICATION,
    FIRMWARE,
    INFORMATIONAL,
    UNKNOWN,
    XidEntry,
    ticket_xid_entries,
    xid_entry,
)

# The categories, in the order the report shows them (API enum values: never renamed).
HARDWARE_XID = "hardware_xid"
MEMORY = "memory"
INTERCONNECT = "interconnect"
THERMAL = "thermal"
OTHER = "other"  # a repair no failure ticket explains: a person found the fault
CATEGORIES = (HARDWARE_XID, MEMORY, INTERCONNECT, THERMAL, OTHER)
CATEGORY_LABELS = {
    HARDWARE_XID: gettext_noop("Hardware XID"),
    MEMORY: gettext_noop("Memory / ECC"),
    INTERCONNECT: gettext_noop("PCIe / NVLink"),
    THERMAL: gettext_noop("Thermal"),
    OTHER: gettext_noop("Other"),
}

# The rule engine's XID classes (rules/xid.py); application faults are the job's, never a failure.
XID_CLASS_CATEGORY: dict[str, str | None] = {
    "bus": INTERCONNECT,
    "ecc": MEMORY,
    "nvlink": INTERCONNECT,
    "hardware": HARDWARE_XID,
    "application": None,
}
assert set(XID_CLASS_CATEGORY) == set(XID_CLASSES), "every XID class has a category (or None)"

# Which rules' tickets are failures, and of which category.
RULE_CATEGORY: dict[str, str] = {
    **{f"xid_{name}": category for name, category in XID_CLASS_CATEGORY.items() if category is not None},
    "ecc_uncorrected": MEMORY,
    "remap_failure": MEMORY,
    "pcie": INTERCONNECT,
    "overheat": THERMAL,
}
# The rules whose tickets can be failures (the report's "HW tickets", the RMA pack's tickets).
FAILURE_RULES: tuple[str, ...] = tuple(RULE_CATEGORY)

# Why an XID code is not counted, by NVIDIA catalog class (the ticket page says it).
NOT_COUNTED = {
    APPLICATION: gettext_noop("not counted as a failure: an application fault"),
    FIRMWARE: gettext_noop("not counted as a failure: a firmware or driver fault"),
    INFORMATIONAL: gettext_noop("not counted as a failure: logged for the record"),
    UNKNOWN: gettext_noop("not counted as a failure"),
}


def category_label(category: str | None) -> str:
    """The category's name in the active language ("All failures" for the report's total row)."""
    if category in CATEGORY_LABELS:
        return gettext(CATEGORY_LABELS[category])
    return gettext("All failures")


def xid_code_category(code: int) -> str | None:
    """The category an XID code counts under, or None when it is not a failure: only a hardware
    fault of NVIDIA's catalog counts (firmware, application and codes missing from the portal's copy
    of the catalog do not); its category is that of the XID class the rule engine files it under."""
    if not xid_entry(code).is_hardware_failure:
        return None
    return XID_CLASS_CATEGORY[xid_class(code)]


def ticket_category(rule: str, codes: Iterable[int] = ()) -> str | None:
    """The category a ticket of `rule` counts under (its XID codes, for an XID ticket), or None."""
    category = RULE_CATEGORY.get(rule)
    if category is None or not rule.startswith("xid_"):
        return category
    codes = list(codes)
    if not codes:
        return category
    return category if any(xid_code_category(code) is not None for code in codes) else None


def evidence_codes(evidence) -> list[int]:
    """The XID codes an XID ticket's evidence keeps ([ts, code] pairs)."""
    codes = []
    for pair in (evidence or {}).get("readings", []) or []:
        try:
            codes.append(int(pair[1]))
        except (TypeError, ValueError, IndexError):
            continue
    return codes


def ticket_category_shown(ticket) -> str:
    """The ticket page's "Failure category": its name, "not a failure" for an XID ticket whose
    codes do not count (application faults included), and "" for the other rules, whose tickets are
    never failures (nothing shown)."""
    if ticket.rule not in RULE_CATEGORY and not ticket.rule.startswith("xid_"):
        return ""
    category = ticket_category(ticket.rule, evidence_codes(ticket.evidence))
    return category_label(category) if category is not None else gettext("not a failure")


def xid_counted_text(code: int) -> str:
    """What the ticket page says of a code: the category it counts under, or why it does not count."""
    category = xid_code_category(code)
    if category is not None:
        return gettext("counted in the reliability report as %(category)s") % {"category": category_label(category)}
    return gettext(NOT_COUNTED.get(xid_entry(code).category, NOT_COUNTED[UNKNOWN]))


@dataclass(frozen=True)
class XidGuidance:
    """An XID code of a ticket as the ticket and repair-history pages show it: NVIDIA's catalog
    entry (description and actions in the reader's language) and how the portal counts the code."""

    entry: XidEntry

    def __getattr__(self, name):  # code, mnemonic, immediate, investigatory: the catalog's
        return getattr(self.entry, name)

    @property
    def description(self) -> str:
        return self.entry.description_shown

    @property
    def actions(self) -> list[tuple[str, str]]:
        return self.entry.actions_shown()

    @property
    def category(self) -> str | None:
        return xid_code_category(self.entry.code)

    @property
    def category_shown(self) -> str:
        """The category's name, or "not a failure" (the repair history's short form)."""
        category = self.category
        return category_label(category) if category is not None else gettext("not a failure")

    @property
    def counted(self) -> str:
        return xid_counted_text(self.entry.code)


def ticket_xid_guidance(ticket) -> list[XidGuidance]:
    """The XID codes of an XID ticket with NVIDIA's actions and the category each counts under."""
    return [XidGuidance(entry) for entry in ticket_xid_entries(ticket)]
