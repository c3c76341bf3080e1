"""The maintenance practices the portal grew from (the seed article), and which rules and
shipped checklists each one drives.

A plain module: the pages, the ticket page and the checklist page ask it which practice a rule
key or a checklist template key belongs to. Every rule in `portal.maintenance.rules.RULES` and
every shipped checklist template has an entry (tests/guidance keeps that true), so a new rule or
template fails the tests until someone says which practice it serves.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


@dataclass(frozen=True)
class Practice:
    slug: str
    title: Promise  # lazily translated
    summary: Promise

    @property
    def template_name(self) -> str:
        return f"guidance/practices/{self.slug}.html"


PRACTICES: tuple[Practice, ...] = (
    Practice(
        "dust-and-airflow",
        _("Dust cleaning and airflow"),
        _("Keep heatsinks, fans and filters clean and the air path open, so the cards run cool."),
    ),
    Practice(
        "rest",
        _("Rest between long runs"),
        _("Train in segments with checkpoints instead of running the cards flat out for days."),
    ),
    Practice(
        "drivers-and-connections",
        _("Drivers and connections"),
        _("Keep drivers and firmware current and every power connector, riser and cable well seated."),
    ),
    Practice(
        "monitoring",
        _("Monitoring temperature and load"),
        _("Watch temperature, power, fans and errors all the time, so problems show before damage."),
    ),
    Practice(
        "backups",
        _("Backups of data and checkpoints"),
        _("Copy training data and model checkpoints regularly, and prove that a restore works."),
    ),
    Practice(
        "repairs",
        _("Repairs done properly"),
        _("Take a failing card out of service, repair or return it properly, and test it before it comes back."),
    ),
    Practice(
        "overclocking",
        _("Care with overclocking"),
        _("Run at stock clocks and power limits, or at a moderate overclock you have tested."),
    ),
)
BY_SLUG: dict[str, Practice] = {practice.slug: practice for practice in PRACTICES}

# Rule key (portal/maintenance/rules) → practice slug.
RULE_PRACTICE: dict[str, str] = {
    "overheat": "dust-and-airflow",
    "thermal_throttle": "dust-and-airflow",
    "fan_wear": "dust-and-airflow",
    "cooling_degradation": "dust-and-airflow",
    "schedule_cleaning": "dust-and-airflow",
    "schedule_fan_inspection": "dust-and-airflow",
    "no_rest": "rest",
    "idle_allocation": "rest",
    "pcie": "drivers-and-connections",
    "xid_bus": "drivers-and-connections",
    "xid_nvlink": "drivers-and-connections",
    "xid_application": "drivers-and-connections",
    "schedule_connection_check": "drivers-and-connections",
    "schedule_driver_review": "drivers-and-connections",
    "agent_silent": "monitoring",
    "ecc_corrected_rate": "monitoring",
    "schedule_backup": "backups",
    "ecc_uncorrected": "repairs",
    "memory_pending": "repairs",
    "remap_failure": "repairs",
    "xid_ecc": "repairs",
    "xid_hardware": "repairs",
    "checklist_failed": "repairs",
    "diagnostic_failed": "repairs",
    "diagnostic_warned": "repairs",
    # a spare on the shelf and a card still under warranty: what proper repairs need at hand
    "spare_stock_low": "repairs",
    "warranty_ending": "repairs",
    "overclock": "overclocking",
}

# Shipped checklist template key (portal/checklists/migrations/0002_shipped_templates.py) → practice slug.
CHECKLIST_PRACTICE: dict[str, str] = {
    "cleaning": "dust-and-airflow",
    "pre_training": "rest",
    "connection_check": "drivers-and-connections",
    "driver_update": "drivers-and-connections",
    "backup_verification": "backups",
    "repair_return": "repairs",
}


def practice_for_rule(rule_key: str) -> Practice | None:
    return BY_SLUG.get(RULE_PRACTICE.get(rule_key, ""))


def practice_for_checklist(template_key: str) -> Practice | None:
    return BY_SLUG.get(CHECKLIST_PRACTICE.get(template_key, ""))


def rules_of(slug: str) -> list[str]:
    return sorted(key for key, practice in RULE_PRACTICE.items() if practice == slug)


def checklists_of(slug: str) -> list[str]:
    return sorted(key for key, practice in CHECKLIST_PRACTICE.items() if practice == slug)
