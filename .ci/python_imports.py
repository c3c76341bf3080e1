"""What the import checks of `make lint` share: a module's dotted name, the modules and names a
module imports (relative imports made absolute), a `get_model` call's words, and the loop over a
package's files with its report. Used by `.ci/own_models.py` and `.ci/readings_door.py`, which
decide what counts as an offence; this module decides nothing.

Not a check itself: it has no `main` of its own to run from `make lint`. The checks import it by
name, as Python puts a script's folder (`.ci/`) first on `sys.path`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """`portal.fleet.selectors` for ROOT/fleet/selectors.py, `portal.fleet` for its `__init__.py`."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a `from ... import` in `module` takes its names from, a relative one made absolute."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@dataclass(frozen=True)
class Imported:
    """One name an import statement binds: `import source [as asname]` (name is None) or
    `from source import name [as asname]`."""

    node: ast.Import | ast.ImportFrom
    source: str
    name: str | None
    asname: str | None

    @property
    def full(self) -> str:
        """`source.name` for a from-import (a submodule or a name of the module), else `source`."""
        return f"{self.source}.{self.name}" if self.name is not None else self.source


def imports(tree: ast.AST, module: str, is_package: bool, skip: Collection[int] = ()) -> Iterator[Imported]:
    """Every name each import statement of `tree` binds, at any depth (inside functions too), but
    the statements whose node ids are in `skip`."""
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            source = absolute(node, module, is_package)
            for alias in node.names:
                yield Imported(node, source, alias.name, alias.asname)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield Imported(node, alias.name, None, alias.asname)


def get_model_words(node: ast.AST) -> list[str] | None:
    """The strings written out as arguments of a call to `get_model` (`apps.get_model("B", "X")`,
    `get_model("B.X")`), or None when `node` is no such call."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "get_model"):
        return None
    return [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]


def check(root: Path, offences: Callable[[Path, Path], list[str]]) -> list[str]:
    """`offences(path, root)` for each Python file under `root`, in path order; migrations (history)
    are not checked."""
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.relative_to(root).parts:
            continue
        out += offences(path, root)
    return out


def main(argv: list[str], offences: Callable[[Path, Path], list[str]], *, failed: str, passed: str) -> int:
    """A check's command line: `argv[1]` is the package to check (default: ./portal). Prints each
    offence, then `failed` (with {count}) or `passed` (with {root}, the package's name); 1 or 0."""
    root = Path(argv[1] if len(argv) > 1 else "portal").resolve()
    found = check(root, offences)
    for line in found:
        print(line)
    if found:
        print(failed.format(count=len(found)))
        return 1
    print(passed.format(root=root.name))
    return 0
