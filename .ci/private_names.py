"""Fail when a module uses another module's private name (one that starts with a single `_`):
`from portal.x import _name`, or `x._name` where `x` is one of this repository's modules. A name
another module needs is part of its module's interface: give it a public name. Run by `make lint`;
`python .ci/private_names.py [ROOT]` checks the repository at ROOT (default: this one) and prints
each offence as path:line: what.

Checked: portal/ and agents/ (imports and module attributes), bench/ and tests/ (imports only: a
benchmark or a test may reach into a module's state to set up or observe it, as monkeypatch
does). Migrations (generated history) are not checked.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("portal", "agents", "bench", "tests")
ATTRIBUTES_CHECKED = ("portal", "agents")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _absolute(node: ast.ImportFrom, package: tuple[str, ...]) -> str:
    if not node.level:
        return node.module or ""
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def offences_in(root: Path, path: Path, *, attributes: bool) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    shown = path.relative_to(root).as_posix()
    found: list[str] = []
    modules: set[str] = set()  # names bound to this repository's modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, path.relative_to(root).parent.parts)
            if source.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{shown}:{node.lineno}: imports {alias.name} from {source}")
                elif _is_module(root, f"{source}.{alias.name}"):
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    modules.add(alias.asname or alias.name.split(".")[0])
    if attributes:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            ):
                found.append(f"{shown}:{node.lineno}: uses {node.value.id}.{node.attr}")
    return found


def offences(root: Path = ROOT) -> list[str]:
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.relative_to(root).parts:
                continue
            found += offences_in(root, path, attributes=package in ATTRIBUTES_CHECKED)
    return found


if __name__ == "__main__":
    problems = offences(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)
