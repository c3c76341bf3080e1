"""What the tests of `.ci/`'s lint scripts share: a small tree of files to run a script on."""

from __future__ import annotations

from pathlib import Path


def files_written(root: Path, files: dict[str, str]) -> Path:
    """Each of `files` (a path relative to root: its text) written under root; root."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
