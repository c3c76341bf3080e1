"""Messages the portal writes for people (a ticket's title, a note in its history, an automatic
check's evidence), stored as an id with its parameters and rendered in the reader's language when
shown, like Django's admin LogEntry.change_message. Stored prose is never parsed back.

Each app declares its messages once (`message(id, template)`, the template an English msgid marked
with gettext_noop so that makemessages finds it). A writer calls the message with its parameters
(`NOTE(code=79)`) and stores both `str()` of it (the English text the API returns) and `.stored()`
(`{"id": ..., "params": {...}}`, a JSON column). A parameter is data shown as it is (a number, a
host name, a label someone typed), a message itself, or, for the names a message declares in
`words`, a key of the portal's own vocabulary (a severity, a record kind, a rule) that a `Word`
puts into English or the reader's language.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext, pgettext


@dataclass(frozen=True)
class Word:
    """How a parameter that is one of the portal's own keys reads: in English, and in the active language."""

    english: Callable[[Any], str]
    shown: Callable[[Any], str]


@dataclass(frozen=True)
class Message:
    """One message of the catalogue: its stable id and its English template (a msgid)."""

    id: str
    template: str
    context: str = ""
    words: Mapping[str, Word] = field(default_factory=dict)

    def __call__(self, **params) -> Said:
        return Said(self.id, params)


@dataclass(frozen=True)
class Said:
    """A message with its parameters: `str()` is the English text, `stored()` what the JSON column holds."""

    id: str
    params: dict

    def stored(self) -> dict:
        return {"id": self.id, "params": {k: _stored_value(v) for k, v in self.params.items()}}

    def __str__(self) -> str:
        return english(self.stored())


def _stored_value(value):
    """A parameter as the JSON column holds it: a message as its id and parameters, a list of
    messages (shown joined with "; ") as a list of those."""
    if isinstance(value, Said):
        return value.stored()
    if isinstance(value, list | tuple) and value and all(isinstance(item, Said) for item in value):
        return [item.stored() for item in value]
    return value


_CATALOGUE: dict[str, Message] = {}


def message(id: str, template: str, *, context: str = "", words: Mapping[str, Word] | None = None) -> Message:
    """Declare a message. Ids are for ever: a reworded template keeps its id (stored rows follow the
    new wording), a message that means something else gets a new one."""
    declared = Message(id, template, context, dict(words or {}))
    if id in _CATALOGUE and _CATALOGUE[id] != declared:
        raise ValueError(f"message id {id!r} is declared twice")
    _CATALOGUE[id] = declared
    return declared


def catalogue() -> dict[str, Message]:
    return dict(_CATALOGUE)


def _is_stored(value) -> bool:
    return isinstance(value, dict) and isinstance(value.get("id"), str) and isinstance(value.get("params", {}), dict)


def _render(stored: dict, *, translate: bool) -> str:
    declared = _CATALOGUE.get(stored["id"])
    if declared is None:
        raise LookupError(stored["id"])
    values = {}
    for name, value in (stored.get("params") or {}).items():
        if _is_stored(value):
            values[name] = _render(value, translate=translate)
        elif isinstance(value, list) and value and all(_is_stored(item) for item in value):
            values[name] = "; ".join(_render(item, translate=translate) for item in value)
        elif name in declared.words:
            word = declared.words[name]
            values[name] = word.shown(value) if translate else word.english(value)
        else:
            values[name] = value
    if not translate:
        template = declared.template
    elif declared.context:
        template = pgettext(declared.context, declared.template)
    else:
        template = gettext(declared.template)
    return template % values


def english(stored: dict) -> str:
    """The message in English, as the writer stored its text."""
    return _render(stored, translate=False)


def shown(stored: dict | None, text: str) -> str:
    """The stored message in the active language; `text` (stored beside it) when there is no message
    (a person's own words) or the catalogue no longer knows it."""
    if not _is_stored(stored):
        return text
    try:
        return _render(stored, translate=True)
    except (LookupError, KeyError, TypeError, ValueError):
        return text


def text_and_stored(value: str | Said | None) -> tuple[str, dict | None]:
    """What a writer stores for a text it was given: (English text, message or None)."""
    if isinstance(value, Said):
        return str(value), value.stored()
    return value or "", None
