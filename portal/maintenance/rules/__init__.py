"""The rule registry: every rule by key, with its defaults and documentation."""

from .base import Rule
from .gpu import GPU_RULES
from .host import SCHEDULES, SILENCE
from .xid import XID_RULES

GPU_RULE_LIST = GPU_RULES
RULES: dict[str, Rule] = {rule.key: rule for rule in [*GPU_RULES, *XID_RULES.values(), SILENCE, *SCHEDULES]}


def get_rule(key: str) -> Rule:
    return RULES[key]


__all__ = ["RULES", "GPU_RULE_LIST", "XID_RULES", "SILENCE", "SCHEDULES", "get_rule", "Rule"]
