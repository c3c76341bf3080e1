"""Fail when a module of the portal reaches another app's models instead of asking that app. Run by
`make lint`; `python .ci/own_models.py [ROOT]` checks the package at ROOT (default: ./portal) and prints
each offence as path:line: what. There is no allow-list: an offence is moved to the owning app's
selectors or services, not excused.

An app owns its models: other apps read them through its `selectors.py` and write them through its
`services.py` (docs/architecture.md, "Where logic lives"). So a module of app A may import
`portal.B.models` (or anything under a `portal/B/models/` package) only when B is A itself, or
when the importer is A's own `models.py` or `models/` package (a foreign key names the model it
points at). Counted, in any form: `from portal.B.models import X`, `from portal.B import models`,
`import portal.B.models`, the same written relatively, and asking the app registry for B's model
by name (`apps.get_model("B", "X")`, `get_model("B.X")`). Imports inside functions count too.
Imports under `if TYPE_CHECKING:` do not: a type named in an annotation reaches no row (and the
name cannot be used at run time).

Not checked: migrations (history, which must name the models of their day), `portal/demo` (it
builds a whole fleet of every app's rows on purpose), and what lies outside `portal/` (tests,
bench). Top-level modules (`portal/api.py`, `portal/urls.py`) belong to no app and ask like any
other.

Why a check of its own beside import-linter: a `forbidden` contract per app (one per app,
each naming every other app's models, each ignoring its own models module) would be twenty
contracts saying one rule, and import-linter cannot see `apps.get_model`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

EXEMPT_APPS = {"demo"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _models_of(name: str, package: str) -> str | None:
    """`portal.B.models` when `name` is that module or lies inside it, else None."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] == package and parts[2] == "models":
        return ".".join(parts[:3])
    return None


def _registry_label(node: ast.AST) -> str | None:
    """The app label of `apps.get_model("B", "X")` or `get_model("B.X")`, when written out."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "get_model"):
        return None
    words = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    if not words:
        return None
    return words[0].partition(".")[0] if len(words) == 1 else words[0]


def _for_type_checkers(tree: ast.AST) -> set[int]:
    """The ids of the nodes under `if TYPE_CHECKING:`."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            inside.update(id(child) for statement in node.body for child in ast.walk(statement))
    return inside


def _imported_models(tree: ast.AST, module: str, is_package: bool, package: str) -> list[tuple[int, str, str]]:
    """(line, models module, how) for each reach into a models module, any app's."""
    found = []
    typing_only = _for_type_checkers(tree)
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, is_package)
            if target := _models_of(source, package):
                found.append((node.lineno, target, f"imports from {source}"))
                continue
            for alias in node.names:
                if target := _models_of(f"{source}.{alias.name}", package):
                    found.append((node.lineno, target, f"imports {source}.{alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if target := _models_of(alias.name, package):
                    found.append((node.lineno, target, f"imports {alias.name}"))
        elif label := _registry_label(node):
            target = f"{package}.{label}.models"
            found.append((node.lineno, target, f"asks the app registry for a model of {target}"))
    return found


def offences(path: Path, root: Path) -> list[str]:
    module = module_name(path, root)
    parts = module.split(".")
    app = parts[1] if len(parts) > 2 else None  # portal.api and portal.urls belong to no app
    if app in EXEMPT_APPS or (app and len(parts) > 2 and parts[2] == "models"):
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for line, target, how in _imported_models(tree, module, path.name == "__init__.py", root.name):
        if target == f"{root.name}.{app}.models":
            continue
        found.add((line, how))
    return [f"{path.relative_to(root.parent)}:{line}: {how}" for line, how in sorted(found)]


def check(root: Path) -> list[str]:
    """The offences under `root`."""
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.relative_to(root).parts:
            continue
        out += offences(path, root)
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "portal").resolve()
    found = check(root)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} reach(es) into another app's models: ask its selectors.py (reads) or services.py (writes)")
        return 1
    print(f"Each app's models are reached through the app itself ({root.name}).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
