"""What a practice page shows besides its text: the rules that watch the practice with the
settings in force for the fleet, and the checklist templates that record it."""

from __future__ import annotations

from portal.checklists.selectors import templates_by_keys
from portal.maintenance.rules import RULES
from portal.maintenance.services.config import RuleParams

from .practices import Practice, checklists_of, rules_of


def practice_panels(*, practice: Practice) -> dict:
    """Two queries: the rule configuration and the checklist templates."""
    params = RuleParams()
    rules = []
    for key in rules_of(practice.slug):
        rule = RULES.get(key)
        if rule is None:
            continue
        enabled, settings = params.get(key, None)
        shown = sorted((name, value) for name, value in settings.items() if value is not None)
        rules.append({"key": key, "rule": rule, "enabled": enabled, "settings": shown})
    templates = templates_by_keys(keys=checklists_of(practice.slug))
    return {"rules": rules, "checklist_templates": templates}
