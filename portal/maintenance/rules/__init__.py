"""The rule registry: every rule by key, with its defaults and documentation."""

from portal.maintenance import messages

from .base import Rule
from .checklist import CHECKLIST_FAILED
from .diagnostic import DIAGNOSTIC_FAILED, DIAGNOSTIC_WARNED
from .gpu import GPU_RULES
from .host import AGENT_SILENT, SCHEDULES
from .jobs import IDLE_ALLOCATION
from .xid import XID_RULES

GPU_RULE_LIST = GPU_RULES
RULES: dict[str, Rule] = {
    rule.key: rule
    for rule in [
        *GPU_RULES,
        *XID_RULES.values(),
        AGENT_SILENT,
        *SCHEDULES,
        CHECKLIST_FAILED,
        DIAGNOSTIC_FAILED,
        DIAGNOSTIC_WARNED,
        IDLE_ALLOCATION,
    ]
}
messages.rules_known(RULES)


__all__ = [
    "RULES",
    "GPU_RULE_LIST",
    "XID_RULES",
    "AGENT_SILENT",
    "SCHEDULES",
    "CHECKLIST_FAILED",
    "DIAGNOSTIC_FAILED",
    "DIAGNOSTIC_WARNED",
    "IDLE_ALLOCATION",
    "Rule",
]
