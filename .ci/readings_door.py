"""Fail when a module of the portal reaches stored readings other than through their one door,
`portal/telemetry/store.py`. Run by `make lint`; `python .ci/readings_door.py [ROOT]` checks the
package at ROOT (default: ./portal) and prints each offence as path:line: what.

Why a check of its own next to import-linter: `Reading` and `ReadingChunk` are Django models of
`portal.telemetry.models`, a module every app needs for other models (`Rollup1h`, `XidEvent`,
`THROTTLE_BIT`...), and import-linter sees modules, not the names taken from them. Moving the two
models into a module of their own would make that a module rule, but also rename their import
path under every migration and writer for no reader's gain. So this check forbids the NAMES,
and import-linter's `forbidden` contract (pyproject.toml) forbids the compression module, which
is a module of its own. Forbidden outside the door and the writers (ALLOWED):

- `Reading`, `ReadingChunk` taken from `portal.telemetry.models` (`from ... import`, or as an
  attribute of that module however it was imported), or asked of the app registry by name
  (`apps.get_model("telemetry", "Reading")`);
- the compression module (`portal.telemetry.services.compression`), in any import form;
- the raw table's name (`partitions.TABLE`, `from ...partitions import TABLE`) and the tables'
  names written out in a string (`telemetry_reading`, `telemetry_chunk`).

Migrations are history and are not checked.

The files, the imports (relative ones made absolute) and the report come from
`.ci/python_imports.py`, which `.ci/own_models.py` shares; what counts as an offence is decided here.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import python_imports
from python_imports import get_model_words, imports, module_name

MODELS = "portal.telemetry.models"
NAMES = {"Reading", "ReadingChunk"}
COMPRESSION = "portal.telemetry.services.compression"
PARTITIONS = "portal.telemetry.services.partitions"
TABLES = ("telemetry_reading", "telemetry_chunk")
FAILED = "{count} way(s) around the readings' door (portal/telemetry/store.py): read through it instead"
PASSED = "Readings reached through portal/telemetry/store.py only ({root})."
# The door, and the writers that store, compress, prune and partition readings.
ALLOWED = {
    "portal.telemetry.store",
    "portal.telemetry.models",
    "portal.telemetry.services.compression",
    "portal.telemetry.services.ingest",
    "portal.telemetry.services.retention",
    "portal.telemetry.services.partitions",
    "portal.telemetry.services.rollup_chunks",  # compresses rollups with the readings' codec
    "portal.telemetry.tasks",  # the compression task: an entry point to the writer
}


def _imports(tree: ast.AST, module: str, is_package: bool, aliases: dict[str, str]) -> list[tuple[int, str]]:
    """The offending imports; fills `aliases` (local name -> the module it stands for: models, partitions)."""
    found: list[tuple[int, str]] = []
    for imported in imports(tree, module, is_package):
        line, source, name, full = imported.node.lineno, imported.source, imported.name, imported.full
        if name is None:  # import source [as asname]
            if source == COMPRESSION or source.startswith(COMPRESSION + "."):
                found.append((line, f"imports {COMPRESSION}"))
            if source in (MODELS, PARTITIONS) and imported.asname:
                aliases[imported.asname] = source
            continue
        if source == MODELS and name in NAMES | {"*"}:
            found.append((line, f"imports {name} from {MODELS}"))
        if source == COMPRESSION or full == COMPRESSION:
            found.append((line, f"imports {COMPRESSION}"))
        if source == PARTITIONS and name in {"TABLE", "*"}:
            found.append((line, f"imports the raw table's name from {PARTITIONS}"))
        if full in (MODELS, PARTITIONS):
            aliases[imported.asname or name] = full
    return found


def _uses(node: ast.AST, aliases: dict[str, str]) -> list[tuple[int, str]]:
    """The offences of one node other than an import: an attribute, a `get_model` call, a string."""
    if isinstance(node, ast.Attribute):
        owner = ast.unparse(node.value)
        target = aliases.get(owner, owner)
        if target == MODELS and node.attr in NAMES:
            return [(node.lineno, f"uses {MODELS}.{node.attr}")]
        if target == PARTITIONS and node.attr == "TABLE":
            return [(node.lineno, "uses the raw table's name (partitions.TABLE)")]
        if target == "portal.telemetry.services" and node.attr == "compression":
            return [(node.lineno, f"uses {COMPRESSION}")]
    elif (words := get_model_words(node)) is not None:
        if any(word.rpartition(".")[2] in NAMES for word in words):
            return [(node.lineno, "asks the app registry for a readings model")]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(node.lineno, f"names the table {table} in a string") for table in TABLES if table in node.value]
    return []


def offences(path: Path, root: Path) -> list[str]:
    module = module_name(path, root)
    if module in ALLOWED:
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, str] = {}  # local name -> module it stands for (models, partitions)
    found = _imports(tree, module, path.name == "__init__.py", aliases)
    for node in ast.walk(tree):
        found += _uses(node, aliases)
    return [f"{path}:{line}: {what}" for line, what in sorted(set(found))]


if __name__ == "__main__":
    sys.exit(python_imports.main(sys.argv, offences, failed=FAILED, passed=PASSED))
