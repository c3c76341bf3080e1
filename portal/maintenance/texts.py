"""Tickets' words in the reader's language.

A ticket stores its title and action in English, as the rule wrote them when it fired: the API
returns them unchanged whatever the language. The pages and the notifications show them
translated where the text is the rule's own wording (its title with the subject, its action);
anything else (a title or action a person or an older release wrote) is shown as stored.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext, gettext_noop, pgettext

from portal.maintenance.rules import RULES
from portal.maintenance.rules.base import _shown

_GPU_SUBJECT = re.compile(r"GPU (\d+) on (.+)", re.DOTALL)
_HOST_SUBJECT = re.compile(r"host (.+)", re.DOTALL)
# services.checklist_tickets: "<item label> failed: <subject>" and the note "<item label> failed in
# checklist run #<n> (<template name>) (<url>)".
_CHECKLIST_TITLE = re.compile(r"(.+) failed: (GPU \d+ on .+|host .+)", re.DOTALL)
_CHECKLIST_NOTE = re.compile(r"(.+) failed in checklist run #(\d+) \((.+)\) \((\S+)\)", re.DOTALL)

# Fixed notes the rules write on ticket events (services and rules store them in English).
EVENT_NOTES = (
    gettext_noop("reached the slowdown threshold"),
    gettext_noop("fan stopped while hot"),
)


def event_word(event: str) -> str:
    """A ticket event as the notifications name it (the value stays the API's)."""
    words = {
        "opened": pgettext("ticket event", "opened"),
        "reopened": pgettext("ticket event", "reopened"),
        "escalated": pgettext("ticket event", "escalated"),
        "resolved": pgettext("ticket event", "resolved"),
    }
    return words.get(event, event)


def severity_word(severity: str) -> str:
    words = {
        "info": pgettext("severity", "info"),
        "warning": pgettext("severity", "warning"),
        "critical": pgettext("severity", "critical"),
    }
    return words.get(severity, severity)


def subject_shown(subject: str) -> str:
    """ "GPU 2 on dgx-07" / "host dgx-07" (as tickets store them) in the active language."""
    if match := _GPU_SUBJECT.fullmatch(subject):
        return gettext("GPU %(index)s on %(host)s") % {"index": match[1], "host": match[2]}
    if match := _HOST_SUBJECT.fullmatch(subject):
        return gettext("host %(host)s") % {"host": match[1]}
    return subject


def ticket_title_shown(*, rule_key: str, title: str) -> str:
    rule = RULES.get(rule_key)
    if rule is not None and title.startswith(f"{rule.title}: "):
        subject = title[len(rule.title) + 2 :]
        return gettext("%(problem)s: %(subject)s") % {"problem": rule.title_shown, "subject": subject_shown(subject)}
    if rule_key == "checklist_failed" and (match := _CHECKLIST_TITLE.fullmatch(title)):
        return gettext("%(item)s failed: %(subject)s") % {"item": _shown(match[1]), "subject": subject_shown(match[2])}
    return title


def note_shown(note: str) -> str:
    """A ticket event's note: the rules' fixed notes and the checklists' "failed in" note translated."""
    if note in EVENT_NOTES:
        return gettext(note)
    if match := _CHECKLIST_NOTE.fullmatch(note):
        return gettext("%(item)s failed in checklist run #%(run)s (%(template)s) (%(url)s)") % {
            "item": _shown(match[1]), "run": match[2], "template": _shown(match[3]), "url": match[4],
        }  # fmt: skip
    return note


def ticket_action_shown(*, rule_key: str, action: str) -> str:
    rule = RULES.get(rule_key)
    if rule is None or not rule.action or not action.startswith(rule.action):
        return action
    rest = action[len(rule.action) :]
    if not rest:
        return rule.action_shown
    if rest.startswith("\n\n"):  # a checklist ticket: the rule's action, then the failed item's note
        return f"{rule.action_shown}\n\n{note_shown(rest[2:])}"
    return action
