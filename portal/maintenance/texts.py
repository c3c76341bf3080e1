"""Tickets' words in the reader's language.

A ticket stores its title and action in English, as the rule wrote them when it fired: the API
returns them unchanged whatever the language. The pages and the notifications show them
translated where the text is the rule's own wording (its title with the subject, its action);
anything else (a title or action a person or an older release wrote) is shown as stored.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext, gettext_noop, pgettext

from portal.core.stored_text import StoredSentences
from portal.maintenance.rules import RULES
from portal.maintenance.rules.base import shown

_GPU_SUBJECT = re.compile(r"GPU (\d+) on (.+)", re.DOTALL)
_HOST_SUBJECT = re.compile(r"host (.+)", re.DOTALL)
# services.checklist_tickets: "<item label> failed: <subject>" and the note "<item label> failed in
# checklist run #<n> (<template name>) (<url>)".
_CHECKLIST_TITLE = re.compile(r"(.+) failed: (GPU \d+ on .+|host .+)", re.DOTALL)
_CHECKLIST_NOTE = re.compile(r"(.+) failed in checklist run #(\d+) \((.+)\) \((\S+)\)", re.DOTALL)

# Notes the rules and services write on ticket events (stored in English), each as a pattern and
# its msgid: the same sentence with placeholders, so English shows exactly what was stored.
_RECORD_KIND = r"(?P<kind>cleaning|connection check|inspection|driver update|backup)"
_METER = r"(?P<meter>busy hours|fan-high hours|thermal cycles)"
_NOTES = [
    (r"reached the slowdown threshold", gettext_noop("reached the slowdown threshold")),
    (r"fan stopped while hot", gettext_noop("fan stopped while hot")),
    (r"fired again within 24 h of being resolved", gettext_noop("fired again within 24 h of being resolved")),
    (r"the clear condition held", gettext_noop("the clear condition held")),
    (r"every grouped GPU ticket resolved", gettext_noop("every grouped GPU ticket resolved")),
    (r"the GPU was replaced by (?P<serial>.+)", gettext_noop("the GPU was replaced by %(serial)s")),
    (r"(?P<count>\d+) of (?P<total>\d+) GPUs", gettext_noop("%(count)s of %(total)s GPUs")),
    (r"grouped under #(?P<parent>\d+)", gettext_noop("grouped under #%(parent)s")),
    (r"assigned to (?P<user>.+)", gettext_noop("assigned to %(user)s")),
    (r"unassigned", gettext_noop("unassigned")),
    (r"last reading (?P<at>\S+)", gettext_noop("last reading %(at)s")),
    (r"XID (?P<code>\d+)", gettext_noop("XID %(code)s")),
    (r"XID (?P<code>\d+) again", gettext_noop("XID %(code)s again")),
    (rf"last {_RECORD_KIND}: (?P<date>[0-9-]+)", gettext_noop("last %(kind)s: %(date)s")),
    (rf"{_METER}: (?P<counted>[0-9,]+) since the last {_RECORD_KIND} \((?P<date>[0-9-]+)\), every "
     r"(?P<limit>[0-9,]+): (?P<past>[0-9,]+) past",
     gettext_noop("%(meter)s: %(counted)s since the last %(kind)s (%(date)s), every %(limit)s: %(past)s past")),
    (r"(?P<hours>\d+) GPU-hours at high load since the last cleaning",
     gettext_noop("%(hours)s GPU-hours at high load since the last cleaning")),
    (r"(?P<before>info|warning|critical) → (?P<after>info|warning|critical)",
     gettext_noop("%(before)s → %(after)s")),
    # portal.diagnostics: a result's ticket, and the gate after a draining ticket is resolved.
    (r"level (?P<level>\d) diagnostic (?P<id>[0-9a-f-]{36}): (?P<tests>.+)",
     gettext_noop("level %(level)s diagnostic %(id)s: %(tests)s")),
    (r"level (?P<level>\d) diagnostic (?P<id>[0-9a-f-]{36}) requested: back in service when it passes",
     gettext_noop("level %(level)s diagnostic %(id)s requested: back in service when it passes")),
    (r"diagnostic (?P<id>[0-9a-f-]{36}) failed: (?P<tests>.+)", gettext_noop("diagnostic %(id)s failed: %(tests)s")),
    (r"a diagnostic is under way: back in service when it passes",
     gettext_noop("a diagnostic is under way: back in service when it passes")),
    (r"diagnostic (?P<id>[0-9a-f-]{36}) expired: run another one",
     gettext_noop("diagnostic %(id)s expired: run another one")),
]  # fmt: skip


def _note_words(name: str, value: str) -> str:
    """A note's word that is itself the portal's (a record kind, a meter, a severity), translated."""
    if name == "kind":
        words = {
            "cleaning": pgettext("record kind", "cleaning"),
            "connection check": pgettext("record kind", "connection check"),
            "inspection": pgettext("record kind", "inspection"),
            "driver update": pgettext("record kind", "driver update"),
            "backup": pgettext("record kind", "backup"),
        }
        return words.get(value, value)
    if name == "meter":
        words = {
            "busy hours": pgettext("usage meter", "busy hours"),
            "fan-high hours": pgettext("usage meter", "fan-high hours"),
            "thermal cycles": pgettext("usage meter", "thermal cycles"),
        }
        return words.get(value, value)
    if name in ("before", "after"):
        return severity_word(value)
    return value


_STORED_NOTES = StoredSentences(_NOTES, word=_note_words, flags=re.DOTALL)


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
        return gettext("%(item)s failed: %(subject)s") % {"item": shown(match[1]), "subject": subject_shown(match[2])}
    return title


def note_shown(note: str) -> str:
    """A ticket event's note in the active language when the portal wrote it; as stored otherwise."""
    if not note:
        return note
    if note.startswith("overdue: "):  # services.beat: a schedule's note once it is overdue
        return gettext("overdue: %(note)s") % {"note": note_shown(note[len("overdue: ") :])}
    if match := _CHECKLIST_NOTE.fullmatch(note):
        return gettext("%(item)s failed in checklist run #%(run)s (%(template)s) (%(url)s)") % {
            "item": shown(match[1]), "run": match[2], "template": shown(match[3]), "url": match[4],
        }  # fmt: skip
    known = _STORED_NOTES.shown(note)
    return note if known is None else known


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
