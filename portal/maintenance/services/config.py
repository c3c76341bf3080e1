"""Rule thresholds: defaults in the rule classes, a fleet-wide row, and per-host overrides."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from portal.core.errors import InvalidInput
from portal.maintenance.models import RuleConfig
from portal.maintenance.rules import RULES

if TYPE_CHECKING:  # a type in annotations only: fleet's rows are reached through its selectors
    from portal.fleet.models import Host


class RuleParams:
    """All RuleConfig rows in memory (a small table), answering params for (rule, host)."""

    def __init__(self, rows=None):
        rows = list(RuleConfig.objects.all()) if rows is None else rows
        self._rows = {(row.rule, row.host_id): row for row in rows}
        self._cache: dict[tuple[str, int | None], tuple[bool, dict]] = {}

    def get(self, rule_key: str, host_id: int | None) -> tuple[bool, dict]:
        if (rule_key, host_id) not in self._rows:
            host_id = None  # no override: the fleet's answer, shared by every such host
        cached = self._cache.get((rule_key, host_id))
        if cached is not None:
            return cached
        params = dict(RULES[rule_key].defaults)
        enabled = True
        for key in ((rule_key, None), (rule_key, host_id)):
            row = self._rows.get(key)
            if row is not None:
                params.update(row.params)
                enabled = row.enabled
        self._cache[(rule_key, host_id)] = (enabled, params)
        return enabled, params


def _check_params(rule_key: str, params: dict) -> dict:
    if rule_key not in RULES:
        raise InvalidInput(f"unknown rule {rule_key!r}", field_errors={"rule": ["unknown rule"]})
    if not isinstance(params, dict):
        raise InvalidInput("params must be an object", field_errors={"params": ["must be a JSON object"]})
    defaults = RULES[rule_key].defaults
    errors: dict[str, list[str]] = {}
    clean = {}
    for name, value in params.items():
        if name not in defaults:
            errors.setdefault("params", []).append(f"{name}: not a setting of this rule")
            continue
        if value is None:
            clean[name] = None
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.setdefault("params", []).append(f"{name}: must be a number")
            continue
        if value < 0:
            errors.setdefault("params", []).append(f"{name}: must not be negative")
            continue
        clean[name] = value
    if errors:
        raise InvalidInput("invalid rule settings", field_errors=errors)
    return clean


@transaction.atomic
def rule_config_set(
    *, rule: str, params: dict, enabled: bool = True, host: Host | None = None, user=None
) -> RuleConfig:
    """Save an admin's thresholds for a rule (fleet-wide, or for one host). Unknown settings,
    non-numbers and negative values are refused with the offending field named."""
    clean = _check_params(rule, params)
    config, _ = RuleConfig.objects.get_or_create(rule=rule, host=host)
    config.params, config.enabled, config.updated_by = clean, enabled, user
    config.save()
    return config
