"""The notes diagnostics writes in tickets' histories, as messages (see portal.core.messages)."""

from __future__ import annotations

from django.utils.translation import gettext_noop

from portal.core.messages import Word, message

# A diagnostic's id as the pages name it: its first 8 characters, as the diagnostics panel and the
# audit log do (the stored English text, the API's, keeps it whole).
SHORT_ID = Word(english=str, shown=lambda value: str(value)[:8])

TICKET = message(
    "diagnostics.note.ticket", gettext_noop("level %(level)s diagnostic %(id)s: %(tests)s"), words={"id": SHORT_ID}
)
GATE_REQUESTED = message(
    "diagnostics.note.gate_requested",
    gettext_noop("level %(level)s diagnostic %(id)s requested: back in service when it passes"),
    words={"id": SHORT_ID},
)
GATE_UNDER_WAY = message(
    "diagnostics.note.gate_under_way", gettext_noop("a diagnostic is under way: back in service when it passes")
)
GATE_NO_GPU = message(
    "diagnostics.note.gate_no_gpu",
    gettext_noop("no GPU of this ticket is left to diagnose (retired): the node stays drained until an admin forces "
                 "the resume"),
)  # fmt: skip
FAILED = message("diagnostics.note.failed", gettext_noop("diagnostic %(id)s failed: %(tests)s"), words={"id": SHORT_ID})
EXPIRED = message(
    "diagnostics.note.expired", gettext_noop("diagnostic %(id)s expired: run another one"), words={"id": SHORT_ID}
)
