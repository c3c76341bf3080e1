"""Fail when a function or method of the portal or the agents is longer than MAX_LINES lines,
counted from its `def` line (decorators not counted) to its last line, docstring and comments
included. Run by `make lint`; `python .ci/function_length.py [ROOT ...]` checks the folders
given (default: ./portal and ./agents) and prints each offence as path:line: name is N lines.

Migrations (generated history) and tests are not checked. A nested function counts towards
the function around it and is also checked on its own.

ALLOWED names functions that may stay longer for now, each with the reason; an entry that no
longer needs to be there (the function is short enough, or gone) is an offence of its own, so
the list only shrinks.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_LINES = 80
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FOLDERS = ("portal", "agents")
# "path relative to the repository root:qualified name" -> why it may be longer for now.
ALLOWED: dict[str, str] = {}


def _skipped(path: Path) -> bool:
    parts = path.parts
    return "migrations" in parts or "tests" in parts or path.name.startswith("test_") or path.name == "conftest.py"


def _functions(tree: ast.AST):
    """Yield (qualified name, node) for every function and method, nested ones included."""

    def walk(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def offences(folders: list[Path], allowed: dict[str, str], *, stale: bool = True) -> list[str]:
    found: list[str] = []
    used: set[str] = set()
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            if _skipped(path.relative_to(folder)):
                continue
            shown = _display(path)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name, node in _functions(tree):
                length = node.end_lineno - node.lineno + 1
                if length <= MAX_LINES:
                    continue
                key = f"{shown}:{name}"
                if key in allowed:
                    used.add(key)
                    continue
                found.append(f"{shown}:{node.lineno}: {name} is {length} lines (at most {MAX_LINES})")
    for key in sorted(set(allowed) - used) if stale else ():
        found.append(f"{key}: allowed to be long but is not (or is gone): take it off ALLOWED")
    return found


def main(argv: list[str]) -> int:
    folders = [Path(arg) for arg in argv] or [ROOT / name for name in DEFAULT_FOLDERS]
    # A stale allow-list entry is only judged when the whole default tree is checked.
    found = offences(folders, ALLOWED, stale=not argv)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
