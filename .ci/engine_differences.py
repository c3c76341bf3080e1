"""Fail when a module asks which database engine it runs on anywhere but `portal/core/engine.py`,
the one module where the differences between SQLite and PostgreSQL live, one function each. Run
by `make lint`; `python .ci/engine_differences.py [ROOT]` checks the repository at ROOT (default:
this one) and prints each offence as path:line: what.

Python cannot tell a connection from a maintenance record (whose `vendor` is a repair shop) before
it runs, so these count as asking, in portal/, bench/ and agents/:

- `.vendor` of anything named like a connection (`connection`, `connections[...]`,
  `schema_editor.connection`, `conn`), or of a name the module assigns from one
  (`db = connections["default"]`);
- `.vendor`, or `engine.name()` (meant for labels), compared with an engine's name
  ("postgresql", "sqlite", ...), whatever it belongs to;
- `getattr(..., "vendor")`.

Migrations are history and are not checked: they run the SQL of their day and import no live
code (tests/core/test_migrations_frozen.py). The tests choose the engine they run on and are not
checked either.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("portal", "bench", "agents")
ALLOWED = {"portal/core/engine.py"}
ENGINE_NAMES = {"postgresql", "sqlite", "mysql", "oracle"}


def _connection_like(source: str) -> bool:
    return "conn" in source.lower()


def _names_of_connections(tree: ast.AST) -> set[str]:
    """The names this module assigns a connection to (`db = connections[DEFAULT_DB_ALIAS]`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _connection_like(ast.unparse(node.value)):
                names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def _asks_the_engine(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "vendor":
        return True
    return isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-2:] == ["engine", "name"]


def _getattr_vendor(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
        return False
    return len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "vendor"


def offences_in(root: Path, path: Path) -> list[str]:
    shown = path.relative_to(root).as_posix()
    if shown in ALLOWED:
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    connections = _names_of_connections(tree)
    found: set[tuple[int, str]] = set()

    def read_of_a_connection(node: ast.AST) -> bool:
        if not (isinstance(node, ast.Attribute) and node.attr == "vendor"):
            return False
        owner = ast.unparse(node.value)
        return _connection_like(owner) or owner in connections

    for node in ast.walk(tree):
        if read_of_a_connection(node):
            found.add((node.lineno, f"reads {ast.unparse(node)}"))
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = any(isinstance(o, ast.Constant) and o.value in ENGINE_NAMES for o in operands)
            asking = [o for o in operands if _asks_the_engine(o) and not read_of_a_connection(o)]
            if named and asking:
                found.add((node.lineno, f"compares {ast.unparse(asking[0])} with an engine's name"))
        elif _getattr_vendor(node):
            found.add((node.lineno, f"reads {ast.unparse(node.args[0])}.vendor through getattr"))
    return [f"{shown}:{line}: {what}" for line, what in sorted(found)]


def offences(root: Path = ROOT) -> list[str]:
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.relative_to(root).parts:
                continue
            found += offences_in(root, path)
    return found


if __name__ == "__main__":
    problems = offences(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} engine question(s) outside portal/core/engine.py: ask the function there that names")
        print("the difference (or add one), not the engine's name")
        sys.exit(1)
    print("The engine is asked in portal/core/engine.py only.")
