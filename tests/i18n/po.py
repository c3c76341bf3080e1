"""A small reader of gettext .po files (no dependency): the entries with their context, plural,
translations and flags; obsolete (#~) entries and the header are left out."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path


@dataclasses.dataclass
class Entry:
    msgid: str
    msgctxt: str | None = None
    msgid_plural: str | None = None
    msgstr: list[str] = dataclasses.field(default_factory=list)  # one item, or one per plural form
    flags: set[str] = dataclasses.field(default_factory=set)
    line: int = 0

    @property
    def key(self) -> tuple[str | None, str]:
        return self.msgctxt, self.msgid

    @property
    def translated(self) -> bool:
        return bool(self.msgstr) and all(self.msgstr)

    @property
    def fuzzy(self) -> bool:
        return "fuzzy" in self.flags

    def __str__(self) -> str:
        context = f" (context {self.msgctxt!r})" if self.msgctxt is not None else ""
        return f"{self.msgid!r}{context}"


_KEYWORD = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+(".*")\s*$')


def read(path: Path) -> list[Entry]:
    entries: list[Entry] = []
    fields: dict[str, str] = {}
    flags: set[str] = set()
    last = None
    start = 0

    def flush():
        nonlocal fields, flags, last
        if "msgid" in fields and fields["msgid"] != "":
            forms = sorted((k for k in fields if k.startswith("msgstr")), key=lambda k: (len(k), k))
            entries.append(
                Entry(
                    msgid=fields["msgid"],
                    msgctxt=fields.get("msgctxt"),
                    msgid_plural=fields.get("msgid_plural"),
                    msgstr=[fields[k] for k in forms],
                    flags=flags,
                    line=start,
                )  # fmt: skip
            )
        fields, flags, last = {}, set(), None

    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line:
            flush()
        elif line.startswith("#,"):
            if fields:
                flush()
            flags |= {flag.strip() for flag in line[2:].split(",")}
        elif line.startswith("#"):
            if fields and not line.startswith("#~"):
                flush()
        elif line.startswith('"') and last:
            fields[last] += ast.literal_eval(line)
        else:
            match = _KEYWORD.match(line)
            if not match:
                raise ValueError(f"{path}:{number}: cannot read {raw!r}")
            keyword, text = match.groups()
            if keyword in ("msgctxt", "msgid") and any(k.startswith("msgstr") for k in fields):
                flush()
            if not fields:
                start = number
            fields[keyword] = ast.literal_eval(text)
            last = keyword
    flush()
    return entries
