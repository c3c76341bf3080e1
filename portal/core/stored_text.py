"""Sentences the portal stores in English (the API returns them as stored), shown in the reader's
language when they are the portal's own."""

from __future__ import annotations

import re
from collections.abc import Callable

from django.utils.translation import gettext


class StoredSentences:
    """Patterns of the sentences some code writes, each with its msgid: the same sentence with
    named placeholders, so English shows exactly what was stored. `word(name, value)` may put a
    placeholder's value (a word that is itself the portal's) into the active language."""

    def __init__(self, sentences, *, word: Callable[[str, str], str] | None = None, flags: int = 0):
        self._compiled = [(re.compile(pattern, flags), msgid) for pattern, msgid in sentences]
        self._word = word or (lambda name, value: value)

    def shown(self, text: str) -> str | None:
        """The translation of a stored sentence that matches one of the patterns, else None."""
        for pattern, msgid in self._compiled:
            if match := pattern.fullmatch(text):
                values = {name: self._word(name, value) for name, value in match.groupdict().items()}
                return gettext(msgid) % values if values else gettext(msgid)
        return None
