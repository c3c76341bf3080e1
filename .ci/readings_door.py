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
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODELS = "portal.telemetry.models"
NAMES = {"Reading", "ReadingChunk"}
COMPRESSION = "portal.telemetry.services.compression"
PARTITIONS = "portal.telemetry.services.partitions"
TABLES = ("telemetry_reading", "telemetry_chunk")
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


def offences(path: Path, root: Path) -> list[str]:
    module = module_name(path, root)
    if module in ALLOWED:
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    aliases: dict[str, str] = {}  # local name -> module it stands for (models, partitions)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, path.name == "__init__.py")
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if source == MODELS and alias.name in NAMES | {"*"}:
                    found.append((node.lineno, f"imports {alias.name} from {MODELS}"))
                if source == COMPRESSION or full == COMPRESSION:
                    found.append((node.lineno, f"imports {COMPRESSION}"))
                if source == PARTITIONS and alias.name in {"TABLE", "*"}:
                    found.append((node.lineno, f"imports the raw table's name from {PARTITIONS}"))
                if full in (MODELS, PARTITIONS):
                    aliases[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == COMPRESSION or alias.name.startswith(COMPRESSION + "."):
                    found.append((node.lineno, f"imports {COMPRESSION}"))
                if alias.name in (MODELS, PARTITIONS) and alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value)
            target = aliases.get(owner, owner)
            if target == MODELS and node.attr in NAMES:
                found.append((node.lineno, f"uses {MODELS}.{node.attr}"))
            elif target == PARTITIONS and node.attr == "TABLE":
                found.append((node.lineno, "uses the raw table's name (partitions.TABLE)"))
            elif target == "portal.telemetry.services" and node.attr == "compression":
                found.append((node.lineno, f"uses {COMPRESSION}"))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "get_model":
            words = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
            if any(word.rpartition(".")[2] in NAMES for word in words):
                found.append((node.lineno, "asks the app registry for a readings model"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for table in TABLES:
                if table in node.value:
                    found.append((node.lineno, f"names the table {table} in a string"))
    return [f"{path}:{line}: {what}" for line, what in sorted(set(found))]


def check(root: Path) -> list[str]:
    out = []
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
        print(f"{len(found)} way(s) around the readings' door (portal/telemetry/store.py): read through it instead")
        return 1
    print(f"Readings reached through portal/telemetry/store.py only ({root.name}).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
