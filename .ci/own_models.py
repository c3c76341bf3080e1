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

The files, the imports (relative ones made absolute) and the report come from
`.ci/python_imports.py`, which `.ci/readings_door.py` shares; what counts as an offence is decided here.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import python_imports
from python_imports import get_model_words, imports, module_name

EXEMPT_APPS = {"demo"}
FAILED = "{count} reach(es) into another app's models: ask its selectors.py (reads) or services.py (writes)"
PASSED = "Each app's models are reached through the app itself ({root})."


def _models_of(name: str, package: str) -> str | None:
    """`portal.B.models` when `name` is that module or lies inside it, else None."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] == package and parts[2] == "models":
        return ".".join(parts[:3])
    return None


def _registry_label(node: ast.AST) -> str | None:
    """The app label of `apps.get_model("B", "X")` or `get_model("B.X")`, when written out."""
    words = get_model_words(node)
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
    for imported in imports(tree, module, is_package, skip=typing_only):
        line, source = imported.node.lineno, imported.source
        if imported.name is None:  # import portal.B.models
            if target := _models_of(source, package):
                found.append((line, target, f"imports {source}"))
        elif target := _models_of(source, package):  # from portal.B.models import X
            found.append((line, target, f"imports from {source}"))
        elif target := _models_of(imported.full, package):  # from portal.B import models
            found.append((line, target, f"imports {imported.full}"))
    for node in ast.walk(tree):
        if id(node) not in typing_only and (label := _registry_label(node)):
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


if __name__ == "__main__":
    sys.exit(python_imports.main(sys.argv, offences, failed=FAILED, passed=PASSED))
