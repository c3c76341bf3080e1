"""The code and the guides say what is: no note of which issue or which earlier run something came
from (that belongs in the commit messages). Migrations are history by nature and are not read."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"\b(issues? #?\d+|what moved where)\b", re.IGNORECASE)


def read_files() -> list[Path]:
    sources = [*REPO.glob("portal/**/*.py"), *REPO.glob("agents/**/*.py"), *REPO.glob("bench/**/*.py")]
    pages = [REPO / "README.md", *REPO.glob("docs/**/*.md"), *REPO.glob("templates/**/*.html")]
    return [path for path in sources + pages if "migrations" not in path.parts]


def history_notes(text: str) -> list[str]:
    lines = enumerate(text.splitlines(), 1)
    return [f"{number}: {line.strip()[:120]}" for number, line in lines if HISTORY.search(line)]


def test_the_pattern_finds_history_notes_and_not_other_words():
    assert history_notes('"""Finished readings, on PostgreSQL (issue 24)."""') != []
    assert history_notes("## What moved where") != []
    assert history_notes("Issues #12 and 13 asked for it") != []
    assert history_notes("the issues page lists open issues; see the tissue 3 test") == []


def test_no_file_carries_a_history_note():
    found = {
        str(path.relative_to(REPO)): notes
        for path in read_files()
        if (notes := history_notes(path.read_text(encoding="utf-8", errors="replace")))
    }
    assert not found, found
