"""The Simplified Chinese catalogue: complete, current and faithful.

(a) `msgfmt --check --statistics` finds 0 untranslated and 0 fuzzy messages in django.po and
    djangojs.po; (b) every string marked in the source (makemessages over a copy of the tree) is
    in the committed catalogue with a translation: a new string fails here until it is
    translated; (c) every translation keeps the placeholders of its msgid (%(name)s, %s, {name}).

Before the catalogue exists these tests skip on a laptop; in CI (CI=true) they fail.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.i18n.po import Entry, read

REPO = Path(__file__).resolve().parents[2]
LOCALE = REPO / "locale" / "zh_Hans" / "LC_MESSAGES"
DOMAINS = ("django", "djangojs")
# What makemessages reads (the same as docs/development.md's commands): the portal's code, templates and scripts.
SOURCES = ("manage.py", "portal", "templates", "static")
NOT_SOURCES = (
    "__pycache__",
    "*.pyc",
    "*.mo",
    "node_modules",
    ".venv",
    "plotly-cartesian.min.js",
    "*.whl",
    "*.png",
    "*.jpg",
)


def catalogue(domain: str) -> Path:
    path = LOCALE / f"{domain}.po"
    if not path.exists():
        skip_or_fail(f"{path.relative_to(REPO)} does not exist (the zh_Hans catalogue)")
    return path


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        skip_or_fail(f"{name} is missing: install Debian's gettext (`make messages` does, as root)")
    return found


# --- (a) complete --------------------------------------------------------------------------


@pytest.mark.parametrize("domain", DOMAINS)
def test_msgfmt_finds_nothing_untranslated_or_fuzzy(domain):
    path = catalogue(domain)
    result = subprocess.run([tool("msgfmt"), "--check", "--statistics", "-o", os.devnull, str(path)],
                            capture_output=True, text=True)  # fmt: skip
    report = result.stderr + result.stdout
    assert result.returncode == 0, f"msgfmt --check refuses {path.name}:\n{report}"
    assert "untranslated" not in report and "fuzzy" not in report, f"{path.name}: {report.strip()}"
    untranslated = [str(e) for e in read(path) if not e.translated]
    fuzzy = [str(e) for e in read(path) if e.fuzzy]
    assert not untranslated and not fuzzy, f"{path.name}: untranslated {untranslated}, fuzzy {fuzzy}"


# --- (b) current ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    """A copy of the tree's sources, so makemessages leaves the tree's catalogue untouched."""
    copy = tmp_path_factory.mktemp("makemessages")
    for name in SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns(*NOT_SOURCES))
        else:
            shutil.copy2(source, copy / name)
    (copy / "locale").mkdir()
    # The portal imports the agent's package (the version /agent/ serves); a link, which
    # makemessages does not follow, so the agent's strings are not the catalogue's.
    (copy / "agents").symlink_to(REPO / "agents")
    return copy


def extract(copy: Path, domain: str) -> list[Entry]:
    """The strings marked in the source for `domain`, as makemessages finds them."""
    tool("xgettext")
    env = {**os.environ, "DEBUG": "true", "DJANGO_SETTINGS_MODULE": "portal.settings"}
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "makemessages", "-d", domain, "-l", "zh_Hans", "--no-obsolete",
         "--no-location", "-v", "0"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, f"makemessages -d {domain} failed:\n{result.stderr}"
    path = copy / "locale" / "zh_Hans" / "LC_MESSAGES" / f"{domain}.po"
    return read(path) if path.exists() else []


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_marked_string_has_a_translation(domain, tree_copy):
    committed = {entry.key: entry for entry in read(catalogue(domain))}
    lacking = []
    for entry in extract(tree_copy, domain):
        have = committed.get(entry.key)
        if have is None:
            lacking.append(f"{entry} is not in the catalogue")
        elif not have.translated or have.fuzzy:
            lacking.append(f"{entry} has no (or a fuzzy) translation")
        elif entry.msgid_plural is not None and have.msgid_plural is None:
            lacking.append(f"{entry} is a plural in the source but not in the catalogue")
    assert not lacking, (
        f"a new string lacks a translation in {catalogue(domain).relative_to(REPO)} "
        f"(run makemessages and translate, docs/development.md, 'Translations'):\n  " + "\n  ".join(lacking)
    )


# --- (c) faithful --------------------------------------------------------------------------

NAMED = re.compile(r"%\((\w+)\)[-#0 +]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]")
POSITIONAL = re.compile(r"%(?!\()[-#0+]*\d*(?:\.\d+)?[diouxXeEfFgGcrs]")
BRACES = re.compile(r"(?<!\{)\{(\w*)\}(?!\})")


def placeholders(text: str, *, printf: bool) -> collections.Counter:
    text = text.replace("%%", "")
    found = collections.Counter(f"%({name})" for name in NAMED.findall(text))
    found.update(f"{{{name}}}" for name in BRACES.findall(text))
    if printf:  # `%s` only where xgettext says the string is a format (a bare "80 %" is text)
        found.update(match.group(0) for match in POSITIONAL.finditer(NAMED.sub("", text)))
    return found


def check_entry(entry: Entry) -> list[str]:
    printf = bool(entry.flags & {"python-format", "javascript-format", "c-format"})
    source = entry.msgid_plural if entry.msgid_plural is not None else entry.msgid
    wanted = placeholders(source, printf=printf)
    allowed = wanted | placeholders(entry.msgid, printf=printf)
    problems = []
    for form, text in enumerate(entry.msgstr):
        if not text:
            continue
        got = placeholders(text, printf=printf)
        label = f"msgstr[{form}]" if entry.msgid_plural is not None else "msgstr"
        if set(got) != set(wanted) and not (entry.msgid_plural is not None and set(wanted) <= set(got) <= set(allowed)):
            problems.append(f"{entry}: {label} {text!r} has {sorted(got)}, the msgid {sorted(wanted)}")
        elif printf and sum(v for k, v in got.items() if not k.startswith(("%(", "{"))) != sum(
            v for k, v in wanted.items() if not k.startswith(("%(", "{"))
        ):
            problems.append(f"{entry}: {label} {text!r} has a different number of positional placeholders")
    return problems


@pytest.mark.parametrize("domain", DOMAINS)
def test_translations_keep_their_placeholders(domain):
    problems = [problem for entry in read(catalogue(domain)) for problem in check_entry(entry)]
    assert not problems, "translations that lose or invent placeholders:\n  " + "\n  ".join(problems)


def test_the_placeholder_check_can_fail():
    lost = Entry(msgid="%(count)s GPUs on %(host)s", msgstr=["%(count)s 块 GPU"], flags={"python-format"})
    positional = Entry(msgid="%s of %s", msgstr=["%s"], flags={"python-format"})
    braces = Entry(msgid="Hello {name}", msgstr=["你好"])
    kept = Entry(msgid="%(count)s GPUs on %(host)s", msgstr=["%(host)s 上的 %(count)s 块 GPU"], flags={"python-format"})
    plural = Entry(msgid="One GPU", msgid_plural="%(count)s GPUs", msgstr=["%(count)s 块 GPU"], flags={"python-format"})
    percent = Entry(msgid="Fan high (≥ 80 % speed)", msgstr=["风扇高速（≥ 80 % 转速）"])
    assert check_entry(lost) and check_entry(positional) and check_entry(braces)
    assert not check_entry(kept) and not check_entry(plural) and not check_entry(percent)
