"""The messages maintenance stores on tickets (title, action) and on their events (notes), and the
words of its own vocabulary they name (severities, record kinds, usage meters, rules). See
portal.core.messages: a ticket keeps its English text (the API's) beside the message, and the pages
and notifications render the message in the reader's language.
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext, gettext_noop, pgettext

from portal.core.messages import Word, message


def _gettext_or_empty(text: str) -> str:
    """A text marked with gettext_noop, translated (gettext("") would be the catalogue's header)."""
    return gettext(text) if text else ""


def severity_word(severity: str) -> str:
    """A severity (info, warning, critical) as the pages and notifications name it."""
    words = {
        "info": pgettext("severity", "info"),
        "warning": pgettext("severity", "warning"),
        "critical": pgettext("severity", "critical"),
    }
    return words.get(severity, severity)


def event_word(event: str) -> str:
    """A ticket event as the notifications name it (the value stays the API's)."""
    words = {
        "opened": pgettext("ticket event", "opened"),
        "reopened": pgettext("ticket event", "reopened"),
        "escalated": pgettext("ticket event", "escalated"),
        "resolved": pgettext("ticket event", "resolved"),
    }
    return words.get(event, event)


def _record_kind_word(kind: str) -> str:
    words = {
        "cleaning": pgettext("record kind", "cleaning"),
        "connection_check": pgettext("record kind", "connection check"),
        "inspection": pgettext("record kind", "inspection"),
        "driver_update": pgettext("record kind", "driver update"),
        "backup": pgettext("record kind", "backup"),
    }
    return words.get(kind, kind.replace("_", " "))


METERS = {  # usage meters a schedule may count (portal.wear), with how a ticket names them
    "busy_hours": "busy hours",
    "fan_high_hours": "fan-high hours",
    "thermal_cycles": "thermal cycles",
}


def _meter_english(meter: str) -> str:
    return METERS.get(meter, meter)


def _meter_word(meter: str) -> str:
    words = {
        "busy_hours": pgettext("usage meter", "busy hours"),
        "fan_high_hours": pgettext("usage meter", "fan-high hours"),
        "thermal_cycles": pgettext("usage meter", "thermal cycles"),
    }
    return words.get(meter, _meter_english(meter))


# The rules by key, for the messages that name a rule's title or action (the rules import this
# module, so they hand themselves over: portal.maintenance.rules).
_RULES: dict = {}


def rules_known(rules: dict) -> None:
    _RULES.update(rules)


def _rule(key: str):
    return _RULES[key]


def _moment(value) -> dt.datetime | None:
    try:
        moment = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if timezone.is_aware(moment) else moment.replace(tzinfo=dt.UTC)


def _moment_english(value) -> str:
    moment = _moment(value)
    return f"{moment.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC" if moment else str(value)


def _moment_shown(value) -> str:
    """An instant (stored as ISO 8601) in the portal's date format and time zone."""
    moment = _moment(value)
    return date_format(timezone.localtime(moment), "SHORT_DATETIME_FORMAT") if moment else str(value)


SEVERITY = Word(english=str, shown=severity_word)
MOMENT = Word(english=_moment_english, shown=_moment_shown)
RECORD_KIND = Word(english=lambda kind: kind.replace("_", " "), shown=_record_kind_word)
METER = Word(english=_meter_english, shown=_meter_word)
RULE_TITLE = Word(english=lambda key: _rule(key).title, shown=lambda key: _rule(key).title_shown)
RULE_ACTION = Word(english=lambda key: _rule(key).action, shown=lambda key: _rule(key).action_shown)
# A checklist's item label or template name: translated when the catalogue has it (the shipped
# wordings are there); a label an admin typed stays as typed.
LABEL = Word(english=str, shown=_gettext_or_empty)

# A ticket's subject, title and action.
GPU_SUBJECT = message("maintenance.subject.gpu", gettext_noop("GPU %(index)s on %(host)s"))
HOST_SUBJECT = message("maintenance.subject.host", gettext_noop("%(host)s"))
TITLE = message("maintenance.title", gettext_noop("%(problem)s: %(subject)s"), words={"problem": RULE_TITLE})
CHECKLIST_TITLE = message("maintenance.title.checklist", gettext_noop("%(item)s failed: %(subject)s"),
                          words={"item": LABEL})  # fmt: skip
ACTION = message("maintenance.action", gettext_noop("%(action)s"), words={"action": RULE_ACTION})
ACTION_WITH_NOTE = message("maintenance.action.with_note", gettext_noop("%(action)s\n\n%(note)s"),
                           words={"action": RULE_ACTION})  # fmt: skip

# Notes on ticket events: the rules', the ticket services', the beat tasks'.
SLOWDOWN = message("maintenance.note.slowdown", gettext_noop("reached the slowdown threshold"))
FAN_STOPPED = message("maintenance.note.fan_stopped", gettext_noop("fan stopped while hot"))
FIRED_AGAIN = message("maintenance.note.fired_again", gettext_noop("fired again within 24 h of being resolved"))
CLEARED = message("maintenance.note.cleared", gettext_noop("the clear condition held"))
GROUP_RESOLVED = message("maintenance.note.group_resolved", gettext_noop("every grouped GPU ticket resolved"))
REPLACED = message("maintenance.note.replaced", gettext_noop("the GPU was replaced by %(serial)s"))
GROUP_COUNT = message("maintenance.note.group_count", gettext_noop("%(count)s of %(total)s GPUs"))
GROUPED_UNDER = message("maintenance.note.grouped_under", gettext_noop("grouped under #%(parent)s"))
ASSIGNED = message("maintenance.note.assigned", gettext_noop("assigned to %(user)s"))
UNASSIGNED = message("maintenance.note.unassigned", gettext_noop("unassigned"))
LAST_READING = message("maintenance.note.last_reading", gettext_noop("last reading %(at)s"), words={"at": MOMENT})
XID = message("maintenance.note.xid", gettext_noop("XID %(code)s"))
XID_AGAIN = message("maintenance.note.xid_again", gettext_noop("XID %(code)s again"))
ESCALATED = message("maintenance.note.escalated", gettext_noop("%(before)s → %(after)s"),
                    words={"before": SEVERITY, "after": SEVERITY})  # fmt: skip
SCHEDULE_LAST = message("maintenance.note.schedule_last", gettext_noop("last %(kind)s: %(date)s"),
                        words={"kind": RECORD_KIND})  # fmt: skip
SCHEDULE_METER = message(
    "maintenance.note.schedule_meter",
    gettext_noop("%(meter)s: %(counted)s since the last %(kind)s (%(date)s), every %(limit)s: %(past)s past"),
    words={"meter": METER, "kind": RECORD_KIND},
)
SCHEDULE_LOAD = message("maintenance.note.schedule_load",
                        gettext_noop("%(hours)s GPU-hours at high load since the last cleaning"))  # fmt: skip
OVERDUE = message("maintenance.note.overdue", gettext_noop("overdue: %(note)s"))
CHECKLIST_FAILED = message(
    "maintenance.note.checklist_failed",
    gettext_noop("%(item)s failed in checklist run #%(run)s (%(template)s) (%(url)s)"),
    words={"item": LABEL, "template": LABEL},
)


def subject(*, host: str, gpu_index: int | None = None):
    """ "GPU 2 on dgx-07" / "dgx-07", the subject a ticket's title names (a host by its name alone, as
    every page names hosts)."""
    return HOST_SUBJECT(host=host) if gpu_index is None else GPU_SUBJECT(index=gpu_index, host=host)
